"""Training operators with an Elasticsearch connection stream their job's log from Elasticsearch (here
filled by the local shipper, as Filebeat fills it on a cluster), waiting and deferred, in a real
dag.test() run: every line once and in order, and the metrics in XCom come from it too."""

from __future__ import annotations

import json
import re
import threading

import pytest
from elasticsearch import Elasticsearch
from es_logs_support import connection_env
from shipper_support import ship

from airflow_ml_provider.hooks.training_backend import TrainingBackendHook
from airflow_ml_provider.logs.display import format_line
from airflow_ml_provider.logs.files import FileLogSource

pytestmark = pytest.mark.integration


def _connections(monkeypatch, es_url: str, index: str, tmp_path) -> str:
    """``es_logs_dag`` (the Elasticsearch under test) and ``ml_training_es`` (a training connection naming it);
    returns the local root of the jobs: one of their own, since the shipper ships every job under it, and the
    root this worker's other tests share holds many (shipping those first made these lines later than settle_s).
    settle_s: how long after a job's end its last lines may still arrive; the shipper here is a thread of this
    busy test process (on a loaded machine it has lagged past 2 s, and the metrics lines came too late)."""
    es_conn = {**json.loads(connection_env(es_url)), "extra": {"index_pattern": index, "settle_s": 8}}
    monkeypatch.setenv("AIRFLOW_CONN_ES_LOGS_DAG", json.dumps(es_conn))
    root = str(tmp_path / "ml")
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_ES", json.dumps(
        {"conn_type": "ml_training", "extra": {"elasticsearch_conn_id": "es_logs_dag", "local_root": root}}))
    return root


def _run_shipping(run_dag, dag_id: str, es_url: str, index: str, backend):
    """Run ``dag_id`` while the shipper ships its jobs' lines into ``index``, as Filebeat does on a cluster."""
    stop = threading.Event()
    shipper = threading.Thread(target=ship, args=(Elasticsearch(es_url), index, backend),
                               kwargs={"stop": stop, "poll_interval": 0.1})
    shipper.start()
    try:
        return run_dag(dag_id)
    finally:
        stop.set()
        shipper.join(30)


def test_training_operators_read_their_log_from_elasticsearch(run_dag, es, es_url, index, monkeypatch, capfd,
                                                               tmp_path):
    root = _connections(monkeypatch, es_url, index, tmp_path)
    monkeypatch.setenv("AIRFLOW_CONN_ML_TRAINING_DEFAULT", json.dumps(
        {"conn_type": "ml_training", "extra": {"local_root": root}}))
    backend = TrainingBackendHook().get_backend("local")  # where both tasks' jobs run
    result = _run_shipping(run_dag, "ml_test_es_training_logs", es_url, index, backend)

    assert result.task_states == {"train_es": "success", "train_es_deferred": "success"}
    out = capfd.readouterr()
    text = out.out + out.err
    for task in ("train_es", "train_es_deferred"):
        summary = result.xcom[task]
        assert summary["metrics"] == {"loss": 1 / 3, "accuracy": 0.9}
        job = summary["job_name"]
        batch = FileLogSource(backend.job_dir(job) / "output.log").read()
        # As the task log shows them: the runtime's JSON events compact (format_line), pods named by the shipper.
        from_file = [(f"{job}-{line.source.replace(' ', '-')}", format_line(line).split("] ", 1)[1])
                     for line in batch.lines]
        # Pod names as the shipper writes them: these lines came from Elasticsearch, not the file.
        streamed = re.findall(rf"\[info +\] \[({re.escape(job)}-[a-z0-9-]+)\] (.*?) +\[[\w.]+\]", text)
        assert len(from_file) == 2 * 3 + 4 + 1
        assert streamed == from_file, task


def test_a_searchs_trials_read_their_logs_from_elasticsearch_as_a_training_task_does(run_dag, es, es_url, index,
                                                                                      monkeypatch, capfd, tmp_path):
    """The training connection names an Elasticsearch connection: a search's trials (waiting in the worker and
    deferred to the triggerer) follow their jobs' logs from it, as its training tasks do, not from the files."""
    _connections(monkeypatch, es_url, index, tmp_path)
    backend = TrainingBackendHook("ml_training_es").get_backend("local")
    result = _run_shipping(run_dag, "ml_test_es_search_logs", es_url, index, backend)

    assert result.task_states == {"search": "success", "search_deferred": "success"}
    out = capfd.readouterr()
    # The shipper names each line's pod <job>-rank-0; a trial reading its file would show it as [rank 0].
    streamed = re.findall(r"\[(aml-[a-z0-9-]+-rank-0)\] trial says", out.out + out.err)
    assert len(set(streamed)) == 4, streamed
    assert "[rank 0] trial says" not in out.out + out.err
    for task in ("search", "search_deferred"):
        assert result.xcom[task]["best_value"] is not None
