"""The shared watch re-lists after 410 Gone and hands on only what changed (a scripted API stands in for
the server here: a real one cannot be made to expire a watch on demand)."""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager

from airflow_ml_provider.jobs.backends.kube_watch import CollectionWatcher


def job(name: str, version: str, phase: str) -> dict:
    return {"metadata": {"name": name, "resourceVersion": version}, "status": {"phase": phase}}


class _Stream:
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

    async def call_api(self, path, method, query_params=(), **kwargs):
        query = dict(query_params)
        self.calls.append("watch" if "watch" in query else "list")
        if "watch" in query:
            if self.watches:
                return _Stream(self.watches.pop(0), self.expire)
            await asyncio.sleep(3600)  # a quiet, healthy watch
        return self.listings.pop(0)


def test_410_gone_relists_and_delivers_only_the_changed_object():
    async def scenario():
        api = ScriptedApi()

        @asynccontextmanager
        async def factory():
            yield api

        watcher = CollectionWatcher(factory, "/apis/x/v1/namespaces/ns/jobs", "label")
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
