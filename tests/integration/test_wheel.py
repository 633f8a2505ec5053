"""The provider as a user installs it: `python -m build` makes a wheel and an sdist; the wheel, installed
into a fresh virtualenv with the pinned Airflow (the published constraints file), is the provider Airflow
lists, with its hooks and connection types, and the `airflow-ml` command runs. The `training` extra
names what the workers' trainers import; one version everywhere."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import airflow_ml_provider
from airflow_ml_provider.get_provider_info import get_provider_info
from support import REPO, TRAINING_IMAGE

pytestmark = pytest.mark.integration
UV = REPO / ".tools" / "bin" / "uv"


def _run(argv: list, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The wheel and sdist `python -m build` makes from the repository (build dependencies through uv)."""
    out = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "PATH": f"{UV.parent}{os.pathsep}{os.environ['PATH']}"}
    _run([sys.executable, "-m", "build", "--installer", "uv", "--outdir", out, REPO], env=env)
    return out


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("airflow_ml_provider-*.whl")
    return wheel


def _metadata(dist: Path):
    wheel = _wheel(dist)
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(archive.read(name).decode())


def test_build_makes_a_wheel_and_an_sdist_of_the_package_alone(dist):
    with zipfile.ZipFile(_wheel(dist)) as archive:
        top = {name.split("/")[0] for name in archive.namelist()}
        entry_points = next(archive.read(n).decode() for n in archive.namelist() if n.endswith("entry_points.txt"))
    assert top == {"airflow_ml_provider", f"airflow_ml_provider-{airflow_ml_provider.__version__}.dist-info"}
    assert "provider_info = airflow_ml_provider.get_provider_info:get_provider_info" in entry_points
    assert "airflow-ml = airflow_ml_provider.cli:main" in entry_points
    (sdist,) = dist.glob("airflow_ml_provider-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[-1] for name in archive.getnames()}
    assert {"setup.cfg", "pyproject.toml", "README.md", "airflow_ml_provider/get_provider_info.py"} <= names


def test_the_wheel_in_a_fresh_virtualenv_is_the_provider_airflow_lists(dist, tmp_path):
    venv = tmp_path / "venv"
    _run([UV, "venv", "--quiet", "--python", sys.executable, venv])
    python = venv / "bin" / "python"
    constraints = REPO / "constraints" / f"constraints-{airflow_ml_provider.__version__}.txt"  # the published one
    airflow_pin = re.search(r"^apache-airflow==\S+$", constraints.read_text(), re.MULTILINE).group(0)
    _run([UV, "pip", "install", "--quiet", "--python", python, "-c", constraints, _wheel(dist), airflow_pin])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHONPATH"))}
    env |= {"AIRFLOW_HOME": str(tmp_path / "home"), "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}"}
    where = _run([python, "-c", "import airflow_ml_provider; print(airflow_ml_provider.__file__)"], env=env,
                 cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(venv)  # the installed wheel, not the repository

    providers = json.loads(_run([venv / "bin" / "airflow", "providers", "list", "-o", "json"], env=env,
                                cwd=tmp_path).stdout)
    ours = [p for p in providers if p["package_name"] == "airflow-ml-provider"]
    assert [p["version"] for p in ours] == [airflow_ml_provider.__version__]

    hooks = json.loads(_run([venv / "bin" / "airflow", "providers", "hooks", "-o", "json"], env=env,
                            cwd=tmp_path).stdout)
    by_type = {h["connection_type"]: h for h in hooks if h.get("package_name") == "airflow-ml-provider"}
    declared = {c["connection-type"]: c["hook-class-name"] for c in get_provider_info()["connection-types"]}
    assert {conn_type: h["class"] for conn_type, h in by_type.items()} == declared

    usage = _run([venv / "bin" / "airflow-ml", "--help"], env=env, cwd=tmp_path).stdout
    assert "render" in usage and "validate" in usage


def test_the_installed_wheel_checks_cluster_jobs_offline_with_nothing_beside_it(dist, tmp_path):
    """Issue 39: `airflow-ml check --backend <k8s>` from the wheel with the `kubernetes` extra, in a folder that has
    only the recipes (no clone, no CRD mirror, no cache): the CRDs come from the package, the built-in kinds'
    schemas from kubernetes-validate, and a job gaining an undeclared field fails naming it."""
    venv = tmp_path / "venv"
    _run([UV, "venv", "--quiet", "--python", sys.executable, venv])
    python = venv / "bin" / "python"
    wheel = _wheel(dist)
    _run([UV, "pip", "install", "--quiet", "--python", python, "-c", REPO / "requirements" / "control.lock",
          f"airflow-ml-provider[kubernetes] @ {wheel.as_uri()}"])
    work = tmp_path / "work"
    shutil.copytree(REPO / "recipes", work / "recipes")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHONPATH", "XDG_CACHE"))}
    env |= {"AIRFLOW_HOME": str(tmp_path / "home"), "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}",
            "HOME": str(tmp_path / "user"),  # no ~/.cache/airflow-ml-provider: nothing but the package
            "AIRFLOW_CONN_ML_TRAINING_DEFAULT": json.dumps({"conn_type": "mltraining", "extra": {
                "image": "registry.example/train:cpu"}})}
    checked = subprocess.run([venv / "bin" / "airflow-ml", "check", "recipes", "--backend", "volcano", "--format",
                              "json"], env=env, cwd=work, capture_output=True, text=True, timeout=600)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    cases = [case for case in json.loads(checked.stdout)["cases"] if case["name"] != "import"]
    assert len(cases) == 4 and all("valid offline (Kubernetes 1.29 and 1.37, the pinned CRDs)" in line
                                   for case in cases for line in case["details"]), cases
    probe = ("import json, sys, yaml\n"
             "from airflow_ml_provider.jobs.backends import get_backend\n"
             "from airflow_ml_provider.jobs.backends.kubernetes import schemas\n"
             "from airflow_ml_provider.jobs.spec import TrainingJobSpec\n"
             "spec = TrainingJobSpec(framework='horovod', command=['python', 't.py'], num_workers=2, image='i:1')\n"
             "(job,) = get_backend('volcano', api_client=None, namespace='ml').manifests('j', spec, {})\n"
             "job['spec']['tasks'][1]['template']['spec']['containers'][0]['imagePullPolicyy'] = 'Always'\n"
             "print(json.dumps(schemas.validate(job)))\n")
    errors = json.loads(_run([python, "-c", probe], env=env, cwd=work).stdout)
    assert errors and "undeclared field 'imagePullPolicyy'" in errors[0] and "CRD volcano-sh/volcano@" in errors[0]


# The runtime modules a worker runs, and what they import that is not the standard library. Not here:
# report.py (evaluation plots, drawn by the Airflow task), served_model.py (loaded by MLflow's server)
# and horovod, which scripts/build_horovod.sh builds from source against the image's TensorFlow.
CONTROL_SIDE = {"report.py", "served_model.py"}
BUILT_FROM_SOURCE = {"horovod"}


def _worker_imports() -> set[str]:
    found = set()
    for path in (REPO / "airflow_ml_provider" / "runtime").glob("*.py"):
        if path.name in CONTROL_SIDE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"airflow_ml_provider", "__future__", "predict"} - BUILT_FROM_SOURCE


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_training_extra_names_what_the_workers_import(dist):
    python = TRAINING_IMAGE / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no training environment {TRAINING_IMAGE} (make training-env)")
    modules = sorted(_worker_imports())
    assert {"tensorflow", "lightgbm", "sklearn", "numpy", "fsspec"} <= set(modules)
    probe = ("import importlib.metadata as m, json, sys; d = m.packages_distributions(); "
             "print(json.dumps({mod: d[mod] for mod in sys.argv[1:]}))")
    distributions = json.loads(_run([python, "-c", probe, *modules]).stdout)
    training = {_normalize(re.split(r"[<>=!~; \[]", r, maxsplit=1)[0])
                for r in _metadata(dist).get_all("Requires-Dist") if re.search(r"extra\s*==\s*.training.", r)}
    for module, names in distributions.items():
        assert {_normalize(n) for n in names} & training, f"the training extra lacks {module} ({names})"


def test_one_version_everywhere(dist):
    version = airflow_ml_provider.__version__
    assert _metadata(dist)["Version"] == version
    assert get_provider_info()["versions"][0] == version
    # the newest release; changes not released yet are listed under "## Unreleased" above it
    newest = re.search(r"^## (?!Unreleased)(\S+)", (REPO / "CHANGELOG.md").read_text(), re.MULTILINE).group(1)
    assert newest == version
