"""The local backend's log read from Elasticsearch keeps to the local jobs' namespace, as a Kubernetes
backend's keeps to its own (issue 19): a real local job followed by a training task with dag.test(),
its lines shipped by the Filebeat stand-in, and a document of another namespace carrying the job's label."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone

import pytest
from elasticsearch import Elasticsearch
from es_logs_support import connection_env, line_doc
from shipper_support import ship

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from support import wait_for

pytestmark = pytest.mark.integration


def test_a_line_of_another_namespace_with_the_local_jobs_label_is_not_read(run_dag, es, es_url, index,
                                                                            monkeypatch, capfd, tmp_path):
    monkeypatch.setenv("AIRFLOW_CONN_ES_LOGS_NS", json.dumps(
        {**json.loads(connection_env(es_url)), "extra": {"index_pattern": index, "settle_s": 8}}))
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps(
        {"conn_type": "ml_training", "extra": {"local_root": str(tmp_path / "ml")}}))
    gate = tmp_path / "ml" / "data" / "es-namespace-gate"  # where the job waits for it (ml_pod_output_test_dags)
    gate.parent.mkdir(parents=True)  # before the job starts: its sandbox shows the data folder if it exists
    backend = TrainingBackendHook().get_backend("local")
    stop = threading.Event()
    shipper = threading.Thread(target=ship, args=(Elasticsearch(es_url), index, backend),
                               kwargs={"stop": stop, "poll_interval": 0.1})

    def intrude():
        """Once the job runs: another namespace's pod, labelled with its name, prints a fail_on line."""
        record = wait_for(lambda: next(iter((tmp_path / "ml" / "jobs").glob("*/job.json")), None),
                          what="the job's record")
        name = json.loads(record.read_text())["name"]
        es.index(index=index, document=line_doc(name, "intruder", 0, "CUDA out of memory (planted)",
                                                datetime.now(timezone.utc), namespace="team-b"), refresh=True)
        gate.touch()

    intruder = threading.Thread(target=intrude)
    shipper.start()
    intruder.start()
    try:
        result = run_dag("ml_test_es_local_namespace")
    finally:
        gate.touch()
        stop.set()
        shipper.join(30)
        intruder.join(30)
    assert result.task_states == {"train": "success"}
    assert result.xcom["train"]["metrics"] == {"auc": 0.9}  # the job's own line, read from Elasticsearch
    assert "planted" not in capfd.readouterr().out
