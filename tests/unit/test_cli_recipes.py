"""`airflow-ml validate` and `airflow-ml render RECIPE`: usable in CI, with Airflow nowhere running."""

from __future__ import annotations

import json

from airflow_ml_provider.cli import main
from airflow_ml_provider.recipes import load_recipe
from support import REPO

MNIST = str(REPO / "recipes" / "mnist.yaml")
INVALID = REPO / "tests" / "fixtures" / "recipes_invalid"


def test_validate_accepts_the_shipped_recipes(capsys):
    assert main(["validate", *sorted(str(p) for p in (REPO / "recipes").glob("*.yaml"))]) == 0
    out = capsys.readouterr().out
    assert "mnist.yaml: ok (DAG recipe_mnist: 2 tasks, 5 jobs)" in out


def test_validate_reports_every_error_with_its_path_and_exits_non_zero(capsys):
    bad = INVALID / "range_min_not_below_max.yaml"
    cycle = INVALID / "dependency_cycle.yaml"
    assert main(["validate", MNIST, str(bad), str(cycle), "missing.yaml"]) == 1
    out, err = capsys.readouterr()
    assert "mnist.yaml: ok" in out
    assert f"{bad}:9: experiments.train.parameters.lr: min (0.5) must be below max (0.1)" in err
    assert f"{cycle}:" in err and "experiments.a.depends_on: dependency cycle: a -> b -> c -> a" in err
    assert "missing.yaml" in err


def test_render_prints_the_tasks_and_every_jobs_manifest_without_running_anything(tmp_path, capsys):
    assert main(["render", "--local-root", str(tmp_path), MNIST]) == 0
    documents = capsys.readouterr().out.split("\n---\n")
    header, manifests = documents[0], documents[1:]
    assert "# task sweep: 4 trial(s), horovod, 2 worker(s) each" in header and "after: baseline" in header
    trials = load_recipe(MNIST).trials("sweep")
    assert len(manifests) == 1 + len(trials)
    for trial, document in zip(trials, manifests[1:], strict=True):
        comment, _, body = document.partition("\n")
        plan = json.loads(body)
        assert comment.startswith(f"# sweep[{trial.index}] ")
        assert plan["argv"][-len(trial.argv) :] == trial.argv
        assert plan["labels"]["ml.airflow.apache.org/map-index"] == str(trial.index)
    assert not (tmp_path / "jobs").exists(), "render must not create a job"


def test_render_limits_trials_and_refuses_an_invalid_recipe(tmp_path, capsys):
    assert main(["render", "--local-root", str(tmp_path), "--max-trials", "1", MNIST]) == 0
    assert capsys.readouterr().out.count("\n---\n") == 2
    assert main(["render", str(INVALID / "workers_zero.yaml")]) == 2
    assert "experiments.train.workers" in capsys.readouterr().err
