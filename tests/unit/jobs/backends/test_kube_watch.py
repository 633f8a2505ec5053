"""The shared watch re-lists after 410 Gone and hands on only what changed; transient failures are retried
with a warning that says what failed, and a subscriber never waits for the first list forever. A
scripted API stands in for the server here: a real one cannot be made to expire a watch, answer 503 or
hang on demand (refusals, 401/403/404, are tested on the real server: tests/integration/kubernetes)."""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import asynccontextmanager

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from airflow_ml_provider.jobs.backends.kubernetes.rest import TransientApiError
from airflow_ml_provider.jobs.backends.kubernetes.watch import CollectionWatcher

PATH, PARAMS = "/apis/x/v1/namespaces/{namespace}/jobs", {"namespace": "ns"}


def job(name: str, version: str, phase: str) -> dict:
    return {"metadata": {"name": name, "resourceVersion": version}, "status": {"phase": phase}}


class _Stream:
    status = 200

    def __init__(self, events, gate: asyncio.Event):
        self.content = self._lines(events, gate)

    @staticmethod
    async def _lines(events, gate):
        await gate.wait()  # the history expires only once the subscribers hold their first objects
        for event in events:
            yield (json.dumps(event) + "\n").encode()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


class ScriptedApi:
    """Lists and watch streams in the order a server whose history was compacted would answer them."""

    def __init__(self):
        self.listings = [
            {"metadata": {"resourceVersion": "5"}, "items": [job("a", "4", "Running"), job("b", "5", "Running")]},
            {"metadata": {"resourceVersion": "9"}, "items": [job("a", "8", "Completed"), job("b", "5", "Running")]},
        ]
        self.watches = [[{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}]]
        self.calls = []
        self.expire = asyncio.Event()

    async def call_api(self, path, method, query_params=(), path_params=None, **kwargs):
        query = dict(query_params)
        self.calls.append("watch" if "watch" in query else "list")
        if "watch" in query:
            if self.watches:
                return _Stream(self.watches.pop(0), self.expire)
            await asyncio.sleep(3600)  # a quiet, healthy watch
        return self.listings.pop(0)


def _factory(api):
    @asynccontextmanager
    async def factory():
        yield api

    return factory


def test_410_gone_relists_and_delivers_only_the_changed_object():
    async def scenario():
        api = ScriptedApi()
        watcher = CollectionWatcher(_factory(api), PATH, PARAMS, "label")
        async with watcher.subscribe("a") as a_changes, watcher.subscribe("b") as b_changes:
            seen_a = [(await a_changes.get())["status"]["phase"]]
            await b_changes.get()
            api.expire.set()
            seen_a.append((await asyncio.wait_for(a_changes.get(), 10))["status"]["phase"])
            await asyncio.sleep(0.1)
            return api, seen_a, b_changes.qsize(), watcher.requests

    api, seen_a, b_pending, requests = asyncio.run(scenario())
    assert seen_a == ["Running", "Completed"], "the change made while the watch was gone arrives after the re-list"
    assert b_pending == 0, "b did not change: it got its object once, nothing more after the re-list"
    assert api.calls == ["list", "watch", "list", "watch"] and requests == 4


def _unavailable() -> ApiException:
    error = ApiException(status=503, reason="Service Unavailable")
    error.body = b'{"kind": "Status", "message": "etcdserver: leader changed", "code": 503}'
    return error


class FlakyListApi(ScriptedApi):
    """The first list fails with 503, then a connection reset; the third goes through."""

    def __init__(self):
        super().__init__()
        self.failures = [_unavailable(), ConnectionResetError("Connection reset by peer")]

    async def call_api(self, path, method, query_params=(), path_params=None, **kwargs):
        if self.failures and "watch" not in dict(query_params):
            self.calls.append("failed list")
            raise self.failures.pop(0)
        return await super().call_api(path, method, query_params, path_params, **kwargs)


def test_transient_failures_are_retried_with_a_warning_that_says_what_failed(caplog):
    async def scenario():
        api = FlakyListApi()
        watcher = CollectionWatcher(_factory(api), PATH, PARAMS, "label")
        async with watcher.subscribe("a") as changes:
            return api, (await changes.get())["status"]["phase"]

    with caplog.at_level(logging.WARNING):
        api, phase = asyncio.run(scenario())
    assert phase == "Running" and api.calls[:3] == ["failed list", "failed list", "list"]
    warnings = [record.getMessage() for record in caplog.records]
    assert "503 etcdserver: leader changed" in warnings[0] and "/apis/x/v1/namespaces/ns/jobs" in warnings[0]
    assert "ConnectionResetError: Connection reset by peer" in warnings[1]


class SilentApi:
    async def call_api(self, *args, **kwargs):
        await asyncio.sleep(3600)  # an API server that accepted the connection and never answers


def test_a_subscriber_waits_for_the_first_list_only_so_long():
    async def scenario():
        watcher = CollectionWatcher(_factory(SilentApi()), PATH, PARAMS, "label")
        async with watcher.subscribe("a", timeout_s=0.2):
            pass

    with pytest.raises(TransientApiError, match="could not list it within 0.2s; last error: none"):
        asyncio.run(scenario())


class GroupedApi(ScriptedApi):
    """Pods of two jobs; after the 410, one pod of job x has finished (no longer kept) and job y's is gone."""

    def __init__(self):
        super().__init__()

        def pod(name: str, job: str, version: str, phase: str) -> dict:
            return {"metadata": {"name": name, "resourceVersion": version, "labels": {"job": job}},
                    "status": {"phase": phase}}

        self.listings = [
            {"metadata": {"resourceVersion": "5"}, "items": [pod("x-0", "x", "1", "Running"),
                                                             pod("x-1", "x", "2", "Running"),
                                                             pod("y-0", "y", "3", "Running")]},
            {"metadata": {"resourceVersion": "9"}, "items": [pod("x-0", "x", "1", "Running"),
                                                             pod("x-1", "x", "8", "Succeeded")]},
        ]


def test_a_watcher_with_keep_hands_each_subscriber_its_whole_group_of_kept_objects():
    def running(pod: dict) -> dict | None:
        return {"version": pod["metadata"]["resourceVersion"]} if pod["status"]["phase"] == "Running" else None

    async def scenario():
        api = GroupedApi()
        watcher = CollectionWatcher(_factory(api), PATH, PARAMS, "job", key=lambda pod: pod["metadata"]["labels"]["job"],
                                    keep=running)
        async with watcher.subscribe("x") as x_changes, watcher.subscribe("y") as y_changes, \
                watcher.subscribe("z") as z_changes:
            first = [await x_changes.get(), await y_changes.get(), await z_changes.get()]
            api.expire.set()
            after = [await asyncio.wait_for(x_changes.get(), 10), await asyncio.wait_for(y_changes.get(), 10)]
            return first, after

    first, after = asyncio.run(scenario())
    assert first == [{"x-0": {"version": "1"}, "x-1": {"version": "2"}}, {"y-0": {"version": "3"}}, {}]
    assert after == [{"x-0": {"version": "1"}}, {}], "a finished pod leaves its group; a group emptied is {}"


class PagedApi(ScriptedApi):
    """Five jobs in pages of two; the first listing's continuation expires (410) after its first page, as it
    does when the server compacts its history between two pages of a long list."""

    def __init__(self):
        super().__init__()
        self.watches = []
        self.pages = []  # (limit, continue) of each list request
        self.expired_once = False

    async def call_api(self, path, method, query_params=(), path_params=None, **kwargs):
        query = dict(query_params)
        if "watch" in query:
            self.calls.append("watch")
            await asyncio.sleep(3600)
        self.pages.append((query.get("limit"), query.get("continue")))
        start = int(query.get("continue") or 0)
        if start and not self.expired_once:
            self.expired_once = True
            error = ApiException(status=410, reason="Gone")
            error.body = b'{"kind": "Status", "reason": "Expired", "code": 410}'
            raise error
        limit = int(query["limit"])
        items = [job(f"j{i}", str(10 + i), "Running") for i in range(5)][start:start + limit]
        more = start + limit < 5
        return {"metadata": {"resourceVersion": "20", **({"continue": str(start + limit)} if more else {})},
                "items": items}


def test_the_list_is_read_in_pages_and_an_expired_continuation_lists_again(monkeypatch, caplog):
    monkeypatch.setattr("airflow_ml_provider.jobs.backends.kubernetes.watch.PAGE", 2)

    async def scenario():
        api = PagedApi()
        watcher = CollectionWatcher(_factory(api), PATH, PARAMS, "label")
        async with watcher.subscribe("j4") as changes:
            return api, (await changes.get())["metadata"]["name"], sorted(watcher.objects)

    with caplog.at_level(logging.INFO):
        api, first, kept = asyncio.run(scenario())
    assert first == "j4" and kept == [f"j{i}" for i in range(5)]
    assert api.pages == [("2", None), ("2", "2"), ("2", None), ("2", "2"), ("2", "4")], \
        "page by page; the expired continuation starts the list again from its first page"
    assert any("continuation expired" in record.getMessage() for record in caplog.records)
