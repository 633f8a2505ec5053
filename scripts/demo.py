"""`make demo`: run the quick-start DAG once for real on the local backend and say where things are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("AIRFLOW_HOME", str(REPO / ".airflow-demo"))
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"


def main() -> int:
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, stdout=subprocess.DEVNULL)
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    sys.path.insert(0, str(REPO / "dags"))
    from ml_quickstart import dag

    dag_run = dag.test()
    with create_session() as session:
        summary = (
            session.query(XComModel)
            .filter_by(dag_id=dag.dag_id, run_id=dag_run.run_id, task_id="report", key="return_value")
            .one_or_none()
        )
    print("\n==== airflow-ml-provider demo ====")
    print(f"DAG run {dag_run.run_id}: {dag_run.state}")
    if summary is None:
        print("the run did not finish; see the task logs above")
        return 1
    for name, result in summary.value.items():
        print(f"{name:9s} job {result['job_name']} ({result['backend']} backend)")
        print(f"          model:   {result['model_path']}")
        print(f"          metrics: {json.dumps(result['metrics'])}")
    print(f"job logs and records: {Path(os.environ['AIRFLOW_HOME']) / 'ml' / 'jobs'}")
    return 0 if str(dag_run.state) == "success" else 1


if __name__ == "__main__":
    sys.exit(main())
