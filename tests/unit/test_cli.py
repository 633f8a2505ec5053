"""`airflow-ml render` prints the launch plan without running anything; bad input exits non-zero."""

from __future__ import annotations

import json

import pytest

from airflow_ml_provider.cli import main


def test_render_prints_the_plan_and_runs_nothing(tmp_path, capsys):
    code = main(["render", "--local-root", str(tmp_path), "--image", "/opt/train", "--", "python", "t.py", "; rm"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0
    assert plan["argv"][0] == "/opt/train/bin/python" and plan["argv"][1].endswith("horovodrun_main.py")
    assert plan["argv"][-3:] == ["python", "t.py", "; rm"], "arguments stay data"
    assert plan["labels"]["ml.airflow.apache.org/task-id"] == "train"
    assert not (tmp_path / "jobs").exists(), "render must not create a job"


def test_render_rejects_a_bad_spec_naming_the_field(capsys):
    assert main(["render", "--workers", "0", "--", "python", "t.py"]) == 2
    assert "TrainingJobSpec.num_workers" in capsys.readouterr().err


def test_render_prints_a_parameter_server_job_of_a_chief_ps_and_workers(tmp_path, capsys):
    import yaml

    trainer = ["python", "-m", "airflow_ml_provider.runtime.tf_ps_trainer"]
    assert main(["render", "--backend", "volcano", "--framework", "tensorflow-ps", "--ps", "2", "--workers", "3",
                 "--image", "img:1", "--", *trainer]) == 0
    [job] = yaml.safe_load_all(capsys.readouterr().out)
    assert [(task["name"], task["replicas"]) for task in job["spec"]["tasks"]] == [("chief", 1), ("ps", 2), ("worker", 3)]
    assert main(["render", "--local-root", str(tmp_path), "--framework", "tensorflow-ps", "--", *trainer]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [(role["name"], role["count"], role["on_failure"]) for role in plan["roles"]] == [
        ("chief", 1, "fail"), ("ps", 1, "fail"), ("worker", 2, "tolerate")]


def test_render_prints_kubernetes_manifests_without_a_cluster(capsys):
    import yaml

    argv = ["render", "--backend", "indexed-job", "--framework", "lightgbm", "--image", "img:1", "--namespace", "ml",
            "--", "python", "-m", "airflow_ml_provider.runtime.lightgbm_trainer"]
    assert main(argv) == 0
    job, service = yaml.safe_load_all(capsys.readouterr().out)
    assert (job["kind"], job["metadata"]["namespace"], job["spec"]["completions"]) == ("Job", "ml", 2)
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"


@pytest.mark.parametrize("backend,kinds", [("indexed-job", ["Job", "Service"]), ("volcano", ["Job"]),
                                           ("trainjob", ["TrainJob"])])
def test_render_prints_each_pytorch_backends_manifests(backend, kinds, capsys):
    import yaml

    argv = ["render", "--backend", backend, "--framework", "pytorch", "--image", "img:1", "--",
            "python", "-m", "airflow_ml_provider.runtime.torch_ddp"]
    assert main(argv) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [obj["kind"] for obj in objects] == kinds
    assert "torchrun" in json.dumps(objects[0]) and "airflow_ml_provider.runtime.torch_ddp" in json.dumps(objects[0])


def test_render_pytorch_locally_and_mpijobs_refusal_names_the_backends_that_run_it(tmp_path, capsys):
    assert main(["render", "--framework", "pytorch", "--local-root", str(tmp_path), "--", "python", "t.py"]) == 0
    assert json.loads(capsys.readouterr().out)["argv"][1].endswith("torchrun_main.py")  # torchrun, its tails sooner
    assert main(["render", "--backend", "mpijob", "--framework", "pytorch", "--image", "img:1", "--",
                 "python", "t.py"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "not 'pytorch'; backends that run it: local, volcano, indexed-job, trainjob")


def test_render_xgboost_locally_on_volcano_and_trainjob_and_mpijobs_refusal(tmp_path, capsys):
    """Issue 42: the local plan runs each worker through the tracker's gate; volcano renders the tracker beside
    worker 0, trainjob on the xgboost runtime; mpijob refuses it naming the backends that run it."""
    import yaml

    assert main(["render", "--framework", "xgboost", "--local-root", str(tmp_path), "--", "python", "t.py"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["argv"][3].endswith("runtime/xgboost_tracker.py") and plan["argv"][4:] == ["worker", "--", "python", "t.py"]
    assert main(["render", "--backend", "volcano", "--framework", "xgboost", "--image", "img:1", "--",
                 "python", "t.py"]) == 0
    [job] = yaml.safe_load_all(capsys.readouterr().out)
    [container] = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    assert "--serve-workers" in container["command"] and container["command"][-2:] == ["python", "t.py"]
    assert main(["render", "--backend", "trainjob", "--framework", "xgboost", "--image", "img:1", "--",
                 "python", "t.py"]) == 0
    [trainjob] = yaml.safe_load_all(capsys.readouterr().out)
    assert trainjob["spec"]["runtimeRef"]["name"] == "airflow-ml-xgboost"
    assert trainjob["spec"]["trainer"]["command"][-2:] == ["python", "t.py"]
    assert main(["render", "--backend", "mpijob", "--framework", "xgboost", "--image", "img:1", "--",
                 "python", "t.py"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "not 'xgboost'; backends that run it: local, volcano, indexed-job, trainjob")
