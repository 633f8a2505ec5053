"""images/training/Dockerfile, read without building it (`make image` builds it and
tests/integration/images/test_training_image.py runs what the jobs invoke in it): its versions come from the one
source each (requirements/training.lock,
scripts/build_horovod.sh, the Makefile), the CPU variant takes the lock's `+cpu` torch from the Makefile's
wheel index, the GPU variant builds Horovod with NCCL and takes CUDA builds of TensorFlow and torch at the
lock's versions, the package goes in without Airflow, and what the Kubernetes backends run in it (sshd,
horovodrun, python) is there."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from support import REPO

DOCKERFILE = REPO / "images" / "training" / "Dockerfile"
LOCK = REPO / "requirements" / "training.lock"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(
        line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines() if line.strip()]


def arg_default(name: str) -> str:
    defaults = [a.split("=", 1)[1] for op, a in instructions() if op == "ARG" and a.startswith(f"{name}=")]
    assert len(defaults) == 1, f"ARG {name} needs exactly one default"
    return defaults[0]


def runs() -> str:
    return "\n".join(args for op, args in instructions() if op == "RUN")


def test_versions_come_from_the_lock_the_horovod_script_and_the_makefile():
    lock_python = re.search(r"--python-version (\d+\.\d+)", LOCK.read_text()).group(1)
    assert arg_default("PYTHON_VERSION") == lock_python
    # any Debian bookworm base (make image: a debootstrap one), whose python${PYTHON_VERSION} is the lock's
    assert arg_default("BASE_IMAGE") == "debian:bookworm-slim"
    assert re.search(r'apt-get install .*"python\$\{PYTHON_VERSION\}"\s+"python\$\{PYTHON_VERSION\}-venv"', runs())
    makefile_uv = re.search(r"^UV_VERSION := (\S+)$", (REPO / "Makefile").read_text(), re.M).group(1)
    assert arg_default("UV_VERSION") == makefile_uv
    pinned = re.findall(r"\b([A-Za-z0-9_.-]+(?:\[[^\]]*\])?)==([0-9][^\s\"']*)", DOCKERFILE.read_text())
    assert pinned == [], f"versions repeated in the Dockerfile: {pinned}"
    copies = [args for op, args in instructions() if op == "COPY"]
    assert "requirements/training.lock requirements/training.lock" in copies
    assert "scripts/build_horovod.sh scripts/build_horovod.sh" in copies
    assert re.search(r"uv pip install .*-r requirements/training\.lock", runs())
    makefile_torch = re.search(r"^TORCH_WHEELS \?=.*,(https://\S+)\)$", (REPO / "Makefile").read_text(), re.M).group(1)
    assert arg_default("TORCH_WHEELS") == makefile_torch, "the CPU torch comes from the Makefile's index"
    assert '--find-links "${TORCH_WHEELS}" -r requirements/training.lock' in runs()
    assert 'scripts/build_horovod.sh "${VENV}"' in runs()


def test_the_gpu_variant_takes_tensorflow_at_the_locks_version_and_builds_horovod_with_nccl(tmp_path):
    gpu_install = re.search(r"tf_version=\$\((sed [^)]*)\)", runs()).group(1)
    version = subprocess.run(["bash", "-c", gpu_install], cwd=REPO, capture_output=True, text=True, check=True)
    assert version.stdout.strip() == re.search(r"^tensorflow-cpu==(\S+)$", LOCK.read_text(), re.M).group(1)
    filtered = subprocess.run(["grep", "-v", "^tensorflow-cpu==", str(LOCK)], capture_output=True, text=True).stdout
    assert "tensorflow-cpu==" not in filtered and "keras==" in filtered
    assert '"tensorflow[and-cuda]==${tf_version}"' in runs()
    torch_install = re.search(r"torch_version=\$\((sed [^)]*)\)", runs()).group(1)
    torch = subprocess.run(["bash", "-c", torch_install], cwd=REPO, capture_output=True, text=True, check=True)
    assert f"torch=={torch.stdout.strip()}+cpu" in LOCK.read_text().splitlines(), "the GPU image's torch is the lock's"
    gpu_lock = subprocess.run(["grep", "-v", "-e", "^tensorflow-cpu==", "-e", "^torch==", str(LOCK)],
                              capture_output=True, text=True).stdout
    assert "\ntorch==" not in gpu_lock and '"torch==${torch_version}"' in runs()
    assert 'if [ "$GPU" = "1" ]; then export HOROVOD_GPU_OPERATIONS=NCCL; fi' in runs()
    script = (REPO / "scripts" / "build_horovod.sh").read_text()
    assert 'build_env+=(HOROVOD_GPU_OPERATIONS="$HOROVOD_GPU_OPERATIONS")' in script, "the flag must reach the build"
    assert re.search(r'for dist in \("tensorflow-cpu", "tensorflow"\)', script), "the GPU image's TensorFlow is found"


def test_the_package_goes_in_without_airflow_and_the_ignore_file_sends_only_what_is_copied():
    assert re.search(r'uv pip install --compile-bytecode --python "\$\{VENV\}/bin/python" --no-deps \.', runs())
    assert "find_spec('airflow') is None" in runs()
    ignore = (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().splitlines()
    sources = {args.split()[0] for op, args in instructions() if op == "COPY" and not args.startswith("--from")}
    assert {f"!{source}" for source in sources} <= set(ignore) and ignore[1] == "*"
    assert all((REPO / source).exists() for source in sources)


@pytest.mark.parametrize("program", ["/usr/sbin/sshd", "horovodrun"])
def test_what_the_mpijob_pods_run_is_in_the_image(program):
    spec = TrainingJobSpec(framework="horovod", command=["python", "-m", "airflow_ml_provider.runtime.horovod_keras"],
                           num_workers=2, image="registry.example/train:cpu")
    from kubernetes.client import ApiClient

    manifest = yaml.safe_load_all(get_backend("mpijob", api_client=ApiClient(), namespace="ml").render("job", spec, {}))
    manifest = next(manifest)
    commands = [c["command"] for r in manifest["spec"]["mpiReplicaSpecs"].values()
                for c in r["template"]["spec"]["containers"]]
    assert any(program in command for command in commands)
    if program == "/usr/sbin/sshd":
        assert "openssh-server" in runs() and "mkdir -p /run/sshd && ssh-keygen -A" in runs()
    else:  # horovodrun lives in the environment's bin, first on PATH (also in ssh sessions)
        env = next(args for op, args in instructions() if op == "ENV")
        assert "PATH=/opt/venv/bin:" in env and 'echo "SetEnv PATH=${PATH}" >> /etc/ssh/sshd_config' in runs()
