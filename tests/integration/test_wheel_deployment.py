"""A production Airflow from the wheel, as docs/deploying.md tells a pip user to make one (issue 40): the wheel
`python -m build` makes, installed into a fresh virtualenv with only the extras that page's install line names
and the published constraints file (constraints/constraints-<version>.txt); Airflow's metadata database in
PostgreSQL (tests/postgres_server.py), migrated by that venv's `airflow db migrate`; the LocalExecutor and the
four components from that venv (tests/airflow_stack.py); an MLflow tracking server as the registry
(tests/tracking_server.py: its backend store in PostgreSQL); the training jobs in the training environment
(.venv-train, AIRFLOW_ML_LOCAL_IMAGE). The shipped ml_training_pipeline runs to a registered champion, which
that venv then loads as docs/connections.md shows (`mlflow.pyfunc.load_model("models:/<name>@champion")`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import postgres_server
import pytest
import tracking_server
from airflow_stack import AirflowStack

import airflow_ml_provider
from support import REPO, TRAINING_IMAGE, needs_sandbox

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800), needs_sandbox,
              pytest.mark.skipif(tracking_server.unavailable() is not None, reason=str(tracking_server.unavailable())),
              pytest.mark.skipif(not (TRAINING_IMAGE / "bin" / "python").exists(),
                                 reason=f"no training environment {TRAINING_IMAGE} (make training-env)")]
UV = REPO / ".tools" / "bin" / "uv"
DAG_ID = "ml_training_pipeline"
# The install line of docs/deploying.md: pip install "airflow-ml-provider[<extras>]==<version>" -c <constraints>
INSTALL = re.compile(r'pip install "airflow-ml-provider\[([a-z0-9,]+)\]==[^"]+" -c (\S+)')
LOAD = """
import sys
import mlflow, numpy as np
mlflow.set_tracking_uri(sys.argv[1])
model = mlflow.pyfunc.load_model("models:/ml_training_pipeline@champion")
(features,) = model.metadata.get_input_schema().inputs
probabilities = model.predict(np.zeros((5, features.shape[-1]), dtype=np.float32))
print(probabilities.shape, float(probabilities.sum()))
"""


def _run(argv: list, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, f"{argv}: {done.stdout[-3000:]}\n{done.stderr[-4000:]}"
    return done


def documented_install() -> tuple[list[str], Path]:
    """The extras and the constraints file that docs/deploying.md's install line names."""
    match = INSTALL.search((REPO / "docs" / "deploying.md").read_text())
    assert match, "docs/deploying.md has no `pip install \"airflow-ml-provider[...]==...\" -c ...` line"
    constraints = REPO / "constraints" / Path(match[2]).name
    assert constraints.name == f"constraints-{airflow_ml_provider.__version__}.txt" and constraints.exists()
    return match[1].split(","), constraints


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """The wheel, built from the repository, installed with the documented extras and constraints alone."""
    out = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "PATH": f"{UV.parent}{os.pathsep}{os.environ['PATH']}"}
    _run([sys.executable, "-m", "build", "--wheel", "--installer", "uv", "--outdir", out, REPO], env=env)
    (wheel,) = out.glob("airflow_ml_provider-*.whl")
    extras, constraints = documented_install()
    venv = tmp_path_factory.mktemp("wheel") / "venv"
    _run([UV, "venv", "--quiet", "--python", sys.executable, venv])
    _run([UV, "pip", "install", "--quiet", "--compile-bytecode", "--python", venv / "bin" / "python",
          "-c", constraints, f"{wheel}[{','.join(extras)}]"])
    return venv


def test_the_documented_install_is_the_pipeline_lightgbm_and_postgres_extras():
    extras, _ = documented_install()
    assert set(extras) == {"pipeline", "lightgbm", "postgres"}


def test_a_wheel_deployment_on_postgresql_runs_the_pipeline_and_loads_the_champion(venv, tmp_path):
    bin_dir = venv / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHONPATH"))}
    where = _run([bin_dir / "python", "-c", "import airflow_ml_provider; print(airflow_ml_provider.__file__)"],
                 env=env, cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(venv)  # the installed wheel, not the repository
    pip_list = json.loads(_run([UV, "pip", "list", "--python", bin_dir / "python", "--format", "json"]).stdout)
    installed = {p["name"].lower(): p["version"] for p in pip_list}
    pins = dict(line.split("==") for line in documented_install()[1].read_text().splitlines()
                if line and not line.startswith("#"))
    unpinned = {name: v for name, v in installed.items() if name != "airflow-ml-provider" and pins.get(name) != v}
    assert not unpinned, f"installed at other versions than the constraints: {unpinned}"

    database = postgres_server.shared().database("wheel_airflow")
    home = tmp_path / "home"
    home.mkdir()
    _run([bin_dir / "airflow", "db", "migrate"], env={**env, "AIRFLOW_HOME": str(home),
                                                      **postgres_server.airflow_settings(database)}, cwd=home)
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(REPO / "dags" / f"{DAG_ID}.py", dags)
    with tracking_server.tracking_server(tmp_path / "mlartifacts", tmp_path / "mlflow-server.log") as server:
        settings = {"AIRFLOW_ML_LOCAL_IMAGE": str(TRAINING_IMAGE), "PYTHONPATH": "",
                    "AIRFLOW_CONN_ML_REGISTRY_DEFAULT": tracking_server.registry_connection(server)}
        with AirflowStack(home, dags, env=settings, venv_bin=bin_dir, database=database) as stack:
            stack.wait_for_dag(DAG_ID)
            run_id = stack.trigger_dag(DAG_ID, {"boost_rounds": 10})
            state = stack.wait_for_run(DAG_ID, run_id, timeout=1200)
            states = {t["task_id"]: t["state"] for t in stack.task_instances(DAG_ID, run_id)}
            assert state == "success", f"{states}\n{stack.log_tails()}"
            deploy = stack.xcom(DAG_ID, run_id, "deploy")
            path = f"/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances/deploy/links"
            links = stack.api("GET", path)["extra_links"]
        assert deploy["version"] == 1 and deploy["promoted"], deploy
        assert links["MLflow model version"] == f"{server['url']}/#/models/{DAG_ID}/versions/1"
        loaded = _run([bin_dir / "python", "-c", LOAD, server["url"]], env=env, cwd=tmp_path).stdout.split("\n")[-2]
    shape, total = loaded.rsplit(" ", 1)
    assert shape == "(5, 2)" and abs(float(total) - 5.0) < 1e-3, loaded  # class probabilities, each row sums to 1
