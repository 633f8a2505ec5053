"""A sync (not deferrable: Airflow's default) training task on the MPIJob backend, run by a real Airflow
deployment (tests/airflow_stack.py): the LocalExecutor's supervised task process, not dag.test(), follows
the job through the shared watch, whose async Kubernetes client reads the connection from inside the
task. The poll interval is 300 s: only the watch can bring the job's end within the test's bounds."""

from __future__ import annotations

import json
import textwrap
import uuid

import pytest
from airflow_stack import AirflowStack
from kube_cluster import play_mpi_operator

pytestmark = pytest.mark.integration

DAG_ID = "ml_test_sync_mpijob"
_DAG = textwrap.dedent(f"""
    from airflow.sdk import DAG
    from airflow_ml_provider.operators.training import HorovodTrainingOperator

    with DAG({DAG_ID!r}, schedule=None, catchup=False):
        HorovodTrainingOperator(task_id="train", command=["python", "-m", "train"], num_workers=2,
                                job={{"backend": "mpijob", "image": "registry.example/train:1"}},
                                deferrable=False, follow={{"poll_interval": 300}}, retries=0)
""")


def test_a_sync_task_follows_its_mpijob_through_the_watch_in_a_real_task_process(
        kube_cluster, kubelet, tmp_path_factory):
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    kube_cluster.request("POST", "/api/v1/namespaces",
                         {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    kube = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kube_cluster.kubeconfig),
                                                 "namespace": namespace}}
    home, dags = tmp_path_factory.mktemp("airflow"), tmp_path_factory.mktemp("dags")
    (dags / "sync_mpijob.py").write_text(_DAG)
    with AirflowStack(home, dags, env={"AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(kube)}) as stack:
        stack.wait_for_dag(DAG_ID)
        done = play_mpi_operator(kube_cluster, kubelet, namespace, [
            '{"event": "metrics", "step": 1, "loss": 0.5}', '{"event": "result", "accuracy": 0.93}'])
        run_id = stack.trigger_dag(DAG_ID)
        assert stack.wait_for_run(DAG_ID, run_id, timeout=240) == "success", stack.log_tails()
        assert done.is_set()
        [task] = stack.task_instances(DAG_ID, run_id)
        assert task["state"] == "success" and task["try_number"] == 1
        result = stack.xcom(DAG_ID, run_id, "train")
        assert result["backend"] == "mpijob" and result["state"] == "SUCCEEDED"
        assert {"loss": 0.5, "accuracy": 0.93}.items() <= result["metrics"].items()
        assert task["duration"] < 120, "the end came from the watch, not from a 300 s poll"
