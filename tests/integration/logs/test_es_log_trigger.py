"""ElasticsearchLogTrigger contract: streams each line once and in order into the task log, fires on
the first rule verdict, survives outages and restarts from its follower state (double and real)."""

from __future__ import annotations

import asyncio
import importlib
import re
import threading
import time

import pytest
from es_logs_support import connection_env, load, training_log

from airflow_ml_provider.jobs.follow import Follower
from airflow_ml_provider.triggers.elasticsearch_log import ElasticsearchLogTrigger

pytestmark = pytest.mark.integration

RULES = {"succeed_on": [r"Training finished"], "fail_on": [r"CUDA out of memory", r"NCCL.*timeout"],
         "retry_on": [r"Connection reset by peer"], "metrics": [r"step=(?P<step>\d+) loss=(?P<loss>[0-9.]+)"]}
_PRINTED = re.compile(r"(\(again\) )?\[(job-[^\]\s]+)\] (.*?) +\[airflow_ml_provider\.triggers\.elasticsearch_log")


@pytest.fixture
def conn(monkeypatch, es_url, index):
    """An ``elasticsearch`` connection to the cluster under test, reading ``index`` without a settle delay."""
    def use(url: str = es_url) -> str:
        monkeypatch.setenv("AIRFLOW_CONN_ES_LOGS", connection_env(url, index_pattern=index, settle_s=0))
        return "es_logs"
    return use


def trigger(conn_id: str, job: str, state: dict | None = None, **options) -> ElasticsearchLogTrigger:
    return ElasticsearchLogTrigger(job=job, elasticsearch_conn_id=conn_id, state=state,
                                   options={"rules": RULES, "poll_interval": 0.05, **options})


def rebuild(existing: ElasticsearchLogTrigger, **changes) -> ElasticsearchLogTrigger:
    """What the triggerer does with a stored trigger: import the class path, call it with the kwargs."""
    path, kwargs = existing.serialize()
    module, _, cls = path.rpartition(".")
    return getattr(importlib.import_module(module), cls)(**{**kwargs, **changes})


def first_event(trig: ElasticsearchLogTrigger) -> dict:
    async def run():
        async for event in trig.run():
            return event.payload
    return asyncio.run(run())


def printed(capfd, again: bool = False) -> list[str]:
    """The job's lines the trigger printed: shown once, or (``again``) shown again after a restart."""
    out = capfd.readouterr()
    return shown(out.out + out.err, again)


def shown(text: str, again: bool = False) -> list[str]:
    return [f"[{pod}] {line}" for label, pod, line in _PRINTED.findall(text) if bool(label) == again]


def log_with_ending(job: str, lines: int, ending: str, pods: int = 3) -> list[dict]:
    docs = training_log(job, pods=pods, lines=lines)
    docs[-1]["message"] = ending
    return docs


def expected_lines(docs: list[dict]) -> list[str]:
    return [f"[{d['kubernetes']['pod']['name']}] {d['message']}" for d in docs]


def test_restarted_trigger_continues_after_the_last_printed_line(es, index, conn, capfd):
    docs = log_with_ending("job-r", 900, "Training finished")
    load(es, index, docs)
    original = trigger(conn(), "job-r", max_lines=100)
    assert rebuild(original).serialize() == original.serialize()

    async def run_until_cancelled() -> None:
        task = asyncio.ensure_future(anext(original.run()))
        while original.state.get("seq", 0) < 3:  # a few batches in
            await asyncio.sleep(0.005)
        task.cancel()  # what a triggerer restart does to a running trigger
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run_until_cancelled())
    payload = first_event(rebuild(original))  # rebuilt from its serialized state, position included
    assert payload["action"] == "finish" and payload["match"]["verdict"] == "succeed"
    out = capfd.readouterr()
    once, again, expected = shown(out.out + out.err), shown(out.out + out.err, again=True), expected_lines(docs)
    assert once == [line for line in expected if line in set(once)], "none twice unlabelled, none out of order"
    assert set(once) | set(again) == set(expected), "none lost across the restart"
    start = expected.index(again[0]) if again else 0
    assert again == expected[start:start + len(again)], "the batch shown when it stopped, shown again labelled"


def test_the_final_state_carries_every_line_and_the_metric_series(es, index, conn, capfd):
    docs = training_log("job-c", pods=2, lines=300)
    for step, doc in enumerate(docs[::10], start=1):
        doc["message"] = f"step={step} loss={1 / step:.4f}"
    docs[-1]["message"] = "Training finished"
    load(es, index, docs)
    payload = first_event(trigger(conn(), "job-c", max_lines=70))
    assert payload["action"] == "finish"
    assert printed(capfd) == expected_lines(docs)
    metrics = Follower(state=payload["state"]).tracker.summary()
    assert [step for step, _ in metrics["series"]["loss"]] == list(range(1, 31))
    assert metrics["best"]["loss"] == pytest.approx(1 / 30, abs=1e-4)
    assert metrics["last"]["loss"] == metrics["best"]["loss"]


@pytest.mark.parametrize(
    ("ending", "verdict"),
    [("Training finished", "succeed"),
     ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", "fail"),
     ("NCCL WARN Call to recv timeout", "fail"),
     ("gloo: Connection reset by peer", "retry"),
     ("Training finished, then NCCL watchdog timeout", "fail")],  # fail wins over succeed
)
def test_the_first_matching_line_decides(es, index, conn, ending, verdict):
    docs = log_with_ending("job-v", 50, ending) + training_log("job-v-after", pods=1, lines=5)
    load(es, index, docs)
    payload = first_event(trigger(conn(), "job-v"))
    assert payload["action"] == ("finish" if verdict == "succeed" else "fail")
    assert payload["match"] == {"verdict": verdict, "pattern": payload["match"]["pattern"],
                                "source": docs[49]["kubernetes"]["pod"]["name"], "line": ending}


def test_100k_lines_through_an_outage_lose_nothing_and_repeat_nothing(es, index, conn, proxy, capfd):
    docs = log_with_ending("job-big", 100_000, "Training finished", pods=4)
    load(es, index, docs)
    proxy.cut_after = 6_000_000  # bytes of responses: the cluster goes away in the middle of the log

    def come_back() -> None:
        proxy.cut.wait(120)
        time.sleep(2.0)
        proxy.set_mode("forward")

    threading.Thread(target=come_back, daemon=True).start()
    payload = first_event(trigger(conn(proxy.url), "job-big", max_lines=5000, outage_grace_s=60))
    assert proxy.cut.is_set(), "the outage never happened"
    assert payload["action"] == "finish"
    out = capfd.readouterr()
    text = out.out + out.err
    assert "log store unavailable" in text and "reachable again" in text
    streamed = shown(text)
    assert len(streamed) == 100_000
    assert streamed == expected_lines(docs)


def test_an_outage_longer_than_the_grace_period_ends_the_wait(es, index, conn, proxy):
    load(es, index, training_log("job-down", pods=1, lines=10))
    proxy.set_mode("unavailable")
    payload = first_event(trigger(conn(proxy.url), "job-down", outage_grace_s=0.5))
    assert payload["action"] == "fail" and payload["retryable"]
    assert "longer than the 0.5 s grace period" in payload["message"]


def test_the_deadline_ends_the_wait(es, index, conn):
    load(es, index, training_log("job-slow", pods=1, lines=10))
    payload = first_event(trigger(conn(), "job-slow", deadline=time.time() + 0.5))
    assert payload["action"] == "fail" and payload["timed_out"]
