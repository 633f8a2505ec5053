"""Issue 39, F12: `airflow-ml check recipes/ --backend <k8s>` gives a recipe's jobs the training connection's image as
a run does (the job's own image, else the connection's ``image_<framework>``, else ``image``:
``JobRunner.build_spec``), so a recipe that names no image is not "needs a container image" where the
connection sets one; without one it still is (the run would be refused the same way)."""

from __future__ import annotations

import json

import pytest

from airflow_ml_provider.cli import main
from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from support import REPO

pytestmark = pytest.mark.integration


def _check(tmp_path, *argv: str) -> tuple[int, list[dict]]:
    report = tmp_path / "report.json"
    code = main(["check", str(REPO / "recipes"), *argv, "--format", "json", "--output", str(report)])
    return code, [case for case in json.loads(report.read_text())["cases"] if case["name"] != "import"]


def _connection(monkeypatch, **extra) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT",
                       json.dumps({"conn_type": TrainingBackendHook.conn_type, "extra": extra}))


@pytest.mark.parametrize("backend", ["volcano", "indexed-job"])
def test_the_recipes_pass_with_the_connections_image(backend, tmp_path, monkeypatch):
    _connection(monkeypatch, image="registry.example/train:cpu", image_horovod="registry.example/train:gpu")
    code, cases = _check(tmp_path, "--backend", backend)
    jobs = [case for case in cases if case["status"] != "skipped"]
    assert jobs, cases
    refused = [case for case in jobs if case["status"] == "failed"]
    if backend == "indexed-job":  # it runs no Horovod: the one finding is the framework, never the image
        assert refused and all("framework: the indexed-job backend" in case["message"] for case in refused), refused
        assert code == 1
    else:
        assert refused == [] and code == 0, refused
    assert not [case for case in jobs if "needs a container image" in (case.get("message") or "")], jobs


def test_without_an_image_anywhere_the_check_says_so(tmp_path, monkeypatch):
    _connection(monkeypatch)
    code, cases = _check(tmp_path, "--backend", "volcano")
    assert code == 1
    assert all("image: the volcano backend needs a container image" in case["message"]
               for case in cases if case["status"] == "failed"), cases


RUNS = {"mpijob": {"horovod", "generic"}, "volcano": {"horovod", "lightgbm", "generic"},
        "indexed-job": {"lightgbm", "generic"}, "trainjob": set()}  # the recipes' frameworks each backend runs
RECIPE_JOBS = {("recipes/lightgbm_sweep.yaml", "data"): "generic", ("recipes/lightgbm_sweep.yaml", "sweep"): "lightgbm",
               ("recipes/mnist.yaml", "baseline"): "horovod", ("recipes/mnist.yaml", "sweep"): "horovod"}


@pytest.mark.parametrize("backend", sorted(RUNS))
def test_the_recipes_jobs_are_valid_offline_on_every_cluster_backend(backend, tmp_path, monkeypatch):
    """Issue 39: every recipe job a backend runs is validated offline (Kubernetes 1.29 and 1.37, the pinned CRDs) and
    passes; the only findings are the frameworks the backend does not run, named as such."""
    _connection(monkeypatch, image="registry.example/train:cpu", image_horovod="registry.example/train:gpu")
    code, cases = _check(tmp_path, "--backend", backend)
    jobs = {(case["suite"], case["name"]): case for case in cases if case["status"] != "skipped"}
    assert set(jobs) == set(RECIPE_JOBS), cases
    for job, case in jobs.items():
        if RECIPE_JOBS[job] in RUNS[backend]:
            assert case["status"] == "ok" and case["details"], case
            assert all("valid offline (Kubernetes 1.29 and 1.37, the pinned CRDs)" in line for line in case["details"])
        else:
            assert case["status"] == "failed" and f"framework: the {backend} backend runs" in case["message"], case
    assert code == (0 if all(RECIPE_JOBS[job] in RUNS[backend] for job in jobs) else 1)


def test_the_shipped_dags_jobs_are_valid_offline_on_volcano(tmp_path, monkeypatch):
    """Volcano runs every framework: each job of the shipped DAGs (the training pipeline's, the recipes', the
    quickstart's) renders there and passes the offline validation; the two known only at run time are skipped."""
    _connection(monkeypatch, image="registry.example/train:cpu", image_horovod="registry.example/train:gpu")
    report = tmp_path / "report.json"
    code = main(["check", str(REPO / "dags"), "--backend", "volcano", "--format", "json", "--output", str(report)])
    cases = [case for case in json.loads(report.read_text())["cases"] if case["name"] != "import"]
    jobs = [case for case in cases if case["status"] != "skipped"]
    assert code == 0 and len(jobs) >= 15, cases
    assert all(case["status"] == "ok" and case["details"] and "valid offline (Kubernetes 1.29 and 1.37, the pinned "
               "CRDs)" in case["details"][0] for case in jobs), jobs
