"""The built training image (images/training/Dockerfile, made by ``make image``: scripts/build_image.sh) for the
tests that run its containers with podman, and the podman settings these machines need
(images/podman/containers.conf: runc on cgroup v1, ulimits under the hard nofile limit)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess

import pytest

from support import REPO

BUILD_SCRIPT = REPO / "scripts" / "build_image.sh"
CONTAINERS_CONF = REPO / "images" / "podman" / "containers.conf"
RUNTIME = "/usr/sbin/runc"
os.environ.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))


def podman(*args: str, timeout: float = 120, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """``podman ARGS`` with this project's settings; argv only."""
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=check,
                          env={**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}, **kwargs)


@functools.cache
def image_name() -> str:
    """The image the current sources give (scripts/build_image.sh --name: a hash of its build context)."""
    return subprocess.run([str(BUILD_SCRIPT), "--name"], capture_output=True, text=True, check=True).stdout.strip()


def unavailable() -> str | None:
    """Why no container of the image can run here (no podman, not root), or None."""
    if shutil.which("podman") is None or not os.path.exists(RUNTIME):
        return "podman and runc are not installed (make image installs them as root)"
    if os.geteuid() != 0:
        return "the image tests run rootful podman: not root"
    return None


def built_image() -> str:
    """The built image's name: ``$AIRFLOW_ML_TRAINING_IMAGE`` where set (another build to check), else the one the
    current sources give. Skips where podman cannot run; fails where it can but that image was not built (a test
    must not pass on a stale image)."""
    if reason := unavailable():
        pytest.skip(reason)
    name = os.environ.get("AIRFLOW_ML_TRAINING_IMAGE") or image_name()
    if podman("image", "exists", name, check=False).returncode != 0:
        pytest.fail(f"the training image {name} of the current sources is not built: run `make image`")
    return name


@functools.cache
def image_user(name: str) -> str:
    """The image's configured user (its USER instruction), as ``uid[:gid]``."""
    config = json.loads(podman("image", "inspect", name).stdout)[0]["Config"]
    return config.get("User") or "0"


def run_in_image(name: str, argv: list[str], *, user: str | None = None, timeout: float = 300,
                 extra: list[str] = ()) -> subprocess.CompletedProcess:
    """``argv`` in a fresh container of the image (``--rm``), as ``user`` (default: the image's), no network."""
    options = ["run", "--rm", "--runtime", RUNTIME, "--network", "none", *extra]
    if user is not None:
        options += ["--user", user]
    return podman(*options, name, *argv, timeout=timeout, check=False)  # the image has no ENTRYPOINT
