"""`airflow-ml check`: the shipped DAGs and recipes are clean (as CI runs it: a subprocess with no
connection and no metadata database), and each kind of finding is reported once, at its file and line,
with exit status 1; the JUnit report parses as JUnit XML."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
import yaml

from airflow_ml_provider.ci.results import relative
from airflow_ml_provider.cli import main
from support import REPO

pytestmark = pytest.mark.integration

def _clean_env(home: Path) -> dict[str, str]:
    """A CI job's environment: a fresh AIRFLOW_HOME (no database), no connection defined."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("AIRFLOW_CONN_", "AIRFLOW__DATABASE", "AIRFLOW__CORE__DAGS_FOLDER"))}
    return {**env, "AIRFLOW_HOME": str(home)}


def _hook(hook_id: str) -> dict:
    """A hook of .pre-commit-hooks.yaml: pre-commit runs ``entry`` + ``args`` (+ the changed files)."""
    [hook] = [hook for hook in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text()) if hook["id"] == hook_id]
    return hook


def _hook_argv(hook: dict) -> list[str]:
    """The hook's command run by this interpreter's environment (where pre-commit would install the package)."""
    command, *rest = shlex.split(hook["entry"])
    return [str(Path(sys.executable).parent / command), *rest, *hook.get("args", [])]


def test_the_shipped_dags_and_recipes_are_clean(tmp_path):
    """As the pre-commit hook ``airflow-ml-check`` runs it (``airflow-ml check dags/ recipes/``)."""
    home = tmp_path / "airflow"
    home.mkdir()
    started = time.monotonic()
    done = subprocess.run([*_hook_argv(_hook("airflow-ml-check")), "--format", "junit"], cwd=REPO,
                          env=_clean_env(home), capture_output=True, text=True, timeout=500)
    print(f"airflow-ml check dags/ recipes/: {time.monotonic() - started:.1f}s (shared CPUs)")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    root = ElementTree.fromstring(done.stdout)
    assert root.tag == "testsuites" and root.get("failures") == "0"
    suites = {suite.get("name"): suite for suite in root.findall("testsuite")}
    assert {"ml_training_pipeline", "ml_quickstart", "recipe_mnist", "recipes/mnist.yaml"} <= set(suites)
    pipeline = {case.get("name"): case for case in suites["ml_training_pipeline"].findall("testcase")}
    for task in ("train_lightgbm", "train_horovod", "evaluate"):
        assert pipeline[task].find("failure") is None and pipeline[task].find("skipped") is None
        assert "rendered for backend local" in pipeline[task].findtext("system-out")
    for task in ("train_lightgbm", "train_horovod"):  # the spot Params' placement: prepare_data's XCom
        assert "job.kubernetes: an upstream task's result, known at run time" in pipeline[task].findtext("system-out")
    assert pipeline["preprocess"].find("skipped") is not None, "its parts are prepare_data's result"
    assert not (home / "airflow.db").exists(), "no metadata database is created"


def _run(tmp_path, *argv: str) -> tuple[int, str]:
    """In this process (Airflow's log already writes to the captured stdout): the report from ``--output``."""
    report = tmp_path / "report"
    code = main(["check", *argv, "--output", str(report)])
    return code, report.read_text()


def _findings(report: str) -> list[dict]:
    return [case for case in json.loads(report)["cases"] if case["status"] == "failed"]


def test_a_dag_file_that_fails_to_import_is_one_finding_at_its_line(tmp_path):
    dag_file = tmp_path / "broken_dag.py"
    dag_file.write_text(textwrap.dedent("""\
        from airflow.sdk import DAG

        with DAG("broken", schedule=None):
            pass

        THRESHOLD = undefined_setting * 2
    """))
    code, report = _run(tmp_path, str(tmp_path), "--format", "json")
    [finding] = _findings(report)
    assert code == 1
    assert (finding["file"], finding["line"]) == (relative(str(dag_file)), 6)
    assert "NameError: name 'undefined_setting' is not defined" in finding["message"]


@pytest.mark.parametrize("report_format", ["json", "junit"])
def test_the_machine_readable_report_is_alone_on_stdout_while_a_dag_fails_to_import(tmp_path, report_format):
    """``airflow-ml check DIR --format json | jq .``: Airflow logs the import error's traceback through a handler
    that holds the stdout it was set up with, and a DAG file may print; all of that goes to stderr."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "broken_dag.py").write_text("from airflow.sdk import DAG\nimport no_such_module_here\n")
    (dags / "chatty_dag.py").write_text('from airflow.sdk import DAG\nprint("hello from a DAG file")\n'
                                        'with DAG("chatty", schedule=None):\n    pass\n')
    home = tmp_path / "airflow"
    home.mkdir()
    done = subprocess.run([str(Path(sys.executable).parent / "airflow-ml"), "check", str(dags), "--format", report_format],
                          env=_clean_env(home), capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    if report_format == "json":
        [finding] = _findings(done.stdout)
        assert "No module named 'no_such_module_here'" in finding["message"]
    else:
        assert ElementTree.fromstring(done.stdout).get("failures") == "1"
    assert "hello from a DAG file" in done.stderr and "no_such_module_here" in done.stderr, "nothing is lost"


def test_a_task_whose_spec_is_invalid_with_its_default_params_is_one_finding(tmp_path):
    dag_file = tmp_path / "bad_spec_dag.py"
    dag_file.write_text(textwrap.dedent("""\
        from airflow.sdk import DAG, Param

        from airflow_ml_provider.operators.training import LightGBMTrainingOperator

        with DAG("bad_spec", schedule=None, params={"workers": Param(0, type="integer")}):
            LightGBMTrainingOperator(
                task_id="train",
                train_data="/data/train.npz",
                num_workers="{{ params.workers }}",
            )
    """))
    code, report = _run(tmp_path, str(dag_file))
    assert code == 1
    [line] = [line for line in report.splitlines() if "bad_spec/train" in line]  # text: one line per finding
    assert line.startswith(f"{relative(str(dag_file))}:6: bad_spec/train: ")
    assert "TrainingJobSpec.num_workers" in line
    assert "1 finding(s)" in report


def test_a_bad_recipe_is_one_finding_at_its_line(tmp_path):
    recipe = tmp_path / "bad.yaml"
    shutil.copy(REPO / "tests" / "fixtures" / "recipes_invalid" / "bad_recipe_name.yaml", recipe)
    code, report = _run(tmp_path, str(recipe), "--format", "junit")
    assert code == 1
    root = ElementTree.fromstring(report)
    failures = root.findall("testsuite/testcase/failure")
    assert len(failures) == 1
    [case] = root.findall("testsuite/testcase[failure]")
    assert case.get("file") == relative(str(recipe)) and int(case.get("line")) > 0
    assert failures[0].text.startswith(f"{relative(str(recipe))}:{case.get('line')}: ")


def test_a_job_the_backend_refuses_is_a_finding_and_usage_errors_exit_2(tmp_path):
    code, report = _run(tmp_path, str(REPO / "dags" / "ml_quickstart.py"), "--backend", "mpijob")
    assert code == 1
    assert "ml_quickstart/train_lightgbm: framework: the mpijob backend runs ['generic', 'horovod']" in report
    assert main(["check", str(tmp_path / "missing")]) == 2
    with pytest.raises(SystemExit) as exited:
        main(["check", "dags/", "--format", "xml"])
    assert exited.value.code == 2


def test_the_recipe_hook_validates_the_changed_recipes(tmp_path):
    """``airflow-ml-validate`` gets the changed files matching its ``files`` pattern: the shipped recipes
    pass, a bad one fails naming its file and line."""
    hook = _hook("airflow-ml-validate")
    shipped = [str(path.relative_to(REPO)) for path in sorted((REPO / "recipes").glob("*.yaml"))]
    assert shipped and all(re.search(hook["files"], path) for path in shipped)
    done = subprocess.run([*_hook_argv(hook), *shipped], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (tmp_path / "recipes").mkdir()
    shutil.copy(REPO / "tests" / "fixtures" / "recipes_invalid" / "bad_recipe_name.yaml", tmp_path / "recipes")
    done = subprocess.run([*_hook_argv(hook), "recipes/bad_recipe_name.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1
    assert re.match(r"recipes/bad_recipe_name\.yaml:\d+: name: ", done.stderr), done.stderr


def test_a_missing_recipes_folder_is_a_warning_and_the_recipes_found_are_counted(tmp_path, monkeypatch):
    """The shipped recipes DAG in a dags folder alone (no recipes/ beside it): not a silent 0 findings."""
    (tmp_path / "dags").mkdir()
    shutil.copy(REPO / "dags" / "ml_recipes.py", tmp_path / "dags")
    code, report = _run(tmp_path, str(tmp_path / "dags"))
    assert code == 0
    dag_file = relative(str(tmp_path / "dags" / "ml_recipes.py"))
    [warning] = [line for line in report.splitlines() if line.startswith(f"{dag_file}:1: {dag_file}/import: warning: ")]
    assert f"no recipes: the recipes folder {tmp_path / 'recipes'} is not a folder" in warning
    assert report.splitlines()[-1].endswith("0 finding(s), 1 warning(s), 0 skipped; recipes: 0 DAG(s) from DAG "
                                            "files, 0 file(s)")

    monkeypatch.setenv("AIRFLOW__ML_TRAINING__RECIPES_FOLDER", str(REPO / "recipes"))
    code, report = _run(tmp_path, str(tmp_path / "dags"), "--format", "json")
    shipped = len(list((REPO / "recipes").glob("*.yaml")))
    assert (code, json.loads(report)["recipes"]) == (0, {"dags": shipped, "files": 0})
