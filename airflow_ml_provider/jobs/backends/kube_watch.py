"""One list+watch per resource collection, shared by every waiter in the process (the informer pattern).

A triggerer following a thousand jobs then holds one watch connection per namespace and kind
instead of polling each job: the API server pushes each change once, and every subscriber gets the
latest object of the job it follows. A watch that expires (410 Gone) is re-listed from scratch.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any

from airflow_ml_provider.jobs.backends.kube_rest import OBJECT

log = logging.getLogger(__name__)
DELETED = {"deleted": True}  # delivered to a subscriber whose object was deleted
_WATCH_S = 240  # server-side lifetime of one watch request


def _version(obj: dict | None) -> str | None:
    return obj["metadata"].get("resourceVersion") if obj else None


class CollectionWatcher:
    """Lists then watches ``path`` (a namespaced collection) with a label selector; fans changes out.

    Args:
        api_factory: returns an async context manager yielding a ``kubernetes_asyncio`` ApiClient.
        path: the collection, e.g. ``/apis/kubeflow.org/v2beta1/namespaces/ml/mpijobs``.
        selector: label selector limiting the watch to this provider's jobs.
    """

    _shared: dict[tuple, CollectionWatcher] = {}

    def __init__(self, api_factory: Callable[[], Any], path: str, selector: str):
        self.api_factory = api_factory
        self.path = path
        self.selector = selector
        self.objects: dict[str, dict] = {}
        self.listed = asyncio.Event()
        self.requests = 0  # list + watch calls made, for the benchmark and the curious
        self._subscribers: dict[str, set[asyncio.Queue]] = {}
        self._task: asyncio.Task | None = None

    @classmethod
    def shared(cls, key: tuple, api_factory: Callable[[], Any], path: str, selector: str) -> CollectionWatcher:
        watcher = cls._shared.get((key, path, selector))
        if watcher is None or watcher._task is None:
            watcher = cls._shared[(key, path, selector)] = cls(api_factory, path, selector)
        return watcher

    @asynccontextmanager
    async def subscribe(self, name: str):
        """A queue that receives the job's object now (once listed) and after every change."""
        queue: asyncio.Queue = asyncio.Queue()
        self._subscribers.setdefault(name, set()).add(queue)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"watch {self.path}")
        try:
            await self.listed.wait()
            queue.put_nowait(self.objects.get(name, DELETED))
            yield queue
        finally:
            self._subscribers[name].discard(queue)
            if not self._subscribers[name]:
                del self._subscribers[name]
            if not self._subscribers and self._task is not None:
                self._task.cancel()
                self._task = None

    def _deliver(self, name: str, obj: dict) -> None:
        for queue in self._subscribers.get(name, ()):
            queue.put_nowait(obj)

    async def _run(self) -> None:
        backoff = 0.5
        while True:
            try:
                async with self.api_factory() as api:
                    version = await self._list(api)
                    backoff = 0.5
                    while version is not None:
                        version = await self._watch(api, version)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure of the stream: log, back off, re-list
                log.warning("watch on %s failed (%r); re-listing in %.1fs", self.path, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30)

    async def _list(self, api) -> str:
        self.requests += 1
        listing = await api.call_api(self.path, "GET", query_params=[("labelSelector", self.selector)],
                                     response_types_map=OBJECT, auth_settings=["BearerToken"],
                                     header_params={"Accept": "application/json"}, _return_http_data_only=True)
        current = {item["metadata"]["name"]: item for item in listing.get("items", [])}
        previous, self.objects = self.objects, current
        if self.listed.is_set():  # a re-list: tell subscribers what changed meanwhile
            for name in set(previous) - set(current):
                self._deliver(name, DELETED)
            for name, obj in current.items():
                if _version(previous.get(name)) != _version(obj):
                    self._deliver(name, obj)
        self.listed.set()  # the first list: each subscriber is handed its object once listed
        return listing["metadata"]["resourceVersion"]

    async def _watch(self, api, version: str) -> str | None:
        """Follow changes from ``version``; returns where to continue, or None to re-list (410 Gone)."""
        self.requests += 1
        response = await api.call_api(
            self.path, "GET", auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True,
            query_params=[("watch", "true"), ("resourceVersion", version), ("labelSelector", self.selector),
                          ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(_WATCH_S))],
            header_params={"Accept": "application/json"},
            _request_timeout=_WATCH_S + 30,  # the server ends the watch first; then it is resumed, not re-listed
        )
        async with response:
            async for raw in response.content:
                if not raw.strip():
                    continue
                event = json.loads(raw)
                obj = event["object"]
                if event["type"] == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise RuntimeError(f"watch error: {obj.get('message')}")
                version = obj["metadata"].get("resourceVersion", version)
                if event["type"] == "BOOKMARK":
                    continue
                name = obj["metadata"]["name"]
                if event["type"] == "DELETED":
                    self.objects.pop(name, None)
                    self._deliver(name, DELETED)
                else:
                    self.objects[name] = obj
                    self._deliver(name, obj)
        return version
