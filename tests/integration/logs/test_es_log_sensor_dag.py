"""ElasticsearchLogSensor in a real dag.test() run (tests/dags/es_log_test_dags.py): log lines stream into
the task log once each across deferrals, rules decide success / failure without retry / retry, metrics
reach XCom, and the connection's secrets appear nowhere."""

from __future__ import annotations

import json
import re

import pytest
from es_logs_support import REAL_URL, connection_env, load, training_log

pytestmark = pytest.mark.integration

PASSWORD, API_KEY = "s3cr3t-pa55-9f3e", "k3y-s3cr3t-51b7"


def job_log(job: str, ending: str) -> list[dict]:
    docs = training_log(job, pods=2, lines=200)
    for step, doc in enumerate(docs[5::20], start=1):
        doc["message"] = f"epoch {step} loss={1 / step:.3f}"
    for step, doc in enumerate(docs[15::20], start=1):  # what the runtime prints (runtime.metrics_log.emit)
        doc["message"] = json.dumps({"event": "metrics", "step": step, "accuracy": 0.5 + step / 100})
    docs[-1]["message"] = ending
    return docs


def test_log_sensor_dag(run_dag, es, es_url, es_double, index, monkeypatch, capfd):
    logs = {job: job_log(job, ending) for job, ending in [
        ("es-job-ok", "Training finished in 42 s"),
        ("es-job-oom", "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"),
        ("es-job-flaky", "gloo::EnforceNotMet: read: Connection reset by peer")]}
    load(es, index, [doc for docs in logs.values() for doc in docs])
    secrets = {"extra": {"index_pattern": index, "settle_s": 0}}
    if es_url != REAL_URL:  # the double ignores credentials, so made-up ones exercise the hook's handling
        secrets = {"login": "elastic", "password": PASSWORD,
                   "extra": {**secrets["extra"], "api_key": API_KEY}}
    conn = json.loads(connection_env(es_url))
    monkeypatch.setenv("AIRFLOW_CONN_ES_LOGS_DAG", json.dumps({**conn, **secrets}))

    result = run_dag("ml_test_es_log_sensor")

    assert {k: result.task_states[k] for k in ("train", "watch", "oom", "flaky")} == {
        "train": "success", "watch": "success", "oom": "failed", "flaky": "failed"}
    tries, xcoms = _tries_and_xcoms(result.run_id)
    assert tries["oom"] == 1, "a fail_on match must not be retried"
    assert tries["flaky"] == 2, "a retry_on match must be retried"

    watched = result.xcom["watch"]
    assert {k: watched[k] for k in ("job", "verdict", "pattern", "line")} == {
        "job": "es-job-ok", "verdict": "succeed", "pattern": "Training finished",
        "line": "Training finished in 42 s"}
    metrics = watched["metrics"]
    assert metrics["series"]["loss"] == [[step, round(1 / step, 3)] for step in range(1, 11)]
    assert metrics["best"]["loss"] == 0.1 and metrics["last"]["loss"] == 0.1
    assert metrics["series"]["accuracy"] == [[step, 0.5 + step / 100] for step in range(1, 11)]
    assert metrics["best"]["accuracy"] == metrics["last"]["accuracy"] == 0.6
    assert xcoms[("watch", "metrics")] == metrics
    assert xcoms[("oom", "metrics")]["last"]["loss"] == 0.1  # pushed before failing

    out = capfd.readouterr()
    text = out.out + out.err
    streamed = re.findall(  # log records whose message is a streamed line (not a summary quoting one)
        r"\[info +\] \[(es-job-ok-worker-\d)\] (line \d+|epoch \d+ loss=[0-9.]+|Training finished in 42 s)",
        text)
    expected = [(d["kubernetes"]["pod"]["name"], d["message"]) for d in logs["es-job-ok"]
                if not d["message"].startswith("{")]
    assert streamed == expected, "each line of the job once, in order"
    saved = xcoms[("watch", "ml_follow_state")]  # the trigger's durable read position, for a restart
    assert saved["seq"] >= 1 and saved["metrics"]["metrics"]["loss"]["last"] == 0.1
    assert "CUDA out of memory" in text and "Connection reset by peer" in text

    if es_url != REAL_URL:
        assert es_double.authorizations == {f"ApiKey {API_KEY}"}
        everything = text + json.dumps(list(xcoms.values()), default=str)
        assert PASSWORD not in everything and API_KEY not in everything


def _tries_and_xcoms(run_id: str) -> tuple[dict[str, int], dict[tuple[str, str], object]]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id="ml_test_es_log_sensor", run_id=run_id)
        tries = {ti.task_id: ti.try_number for ti in tis}
        rows = session.query(XComModel).filter_by(dag_id="ml_test_es_log_sensor", run_id=run_id)
        xcoms = {(row.task_id, row.key): row.value for row in rows}
    return tries, xcoms
