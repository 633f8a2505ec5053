"""One list+watch per resource collection, shared by every waiter in the process (the informer pattern).

A triggerer following a thousand jobs then holds one watch connection per namespace and kind
instead of polling each job: the API server pushes each change once, and every subscriber gets the
latest object of the job it follows. A watch that expires (410 Gone) is re-listed from scratch.

Failures: 429/5xx, dropped connections and timeouts are retried with capped exponential backoff and a
warning that says what failed. A refusal (401/403, or 404 for a collection the server does not serve,
e.g. a CRD that is not installed) is retried a few times quickly (RBAC and new CRDs take a moment
to apply; those retries are logged at INFO), then ends every subscription with BackendAccessError
carrying the API server's message, which the subscriber reports.

The first list (and every re-list) is read in pages of ``PAGE`` objects (``limit``/``continue``), so that a
namespace of 10,000 jobs is listed in requests that each end well within their timeout; a list whose
continuation expires meanwhile (410) starts again. A watcher made with ``slim`` keeps only what it makes of
each object (what the status core reads of a job, not its pod templates).

A watcher made with ``keep`` keeps only what it makes of each object, grouped: a subscriber to a key
gets every kept object filed under it (``{name: kept}``), each time one of them changes, so that a
follower sees all the pods of its job, and a triggerer holds slim copies of a cluster's pods or Nodes
rather than whole objects.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any

from airflow_ml_provider.jobs.backends.base import BackendAccessError
from airflow_ml_provider.jobs.backends.kubernetes.rest import (
    OBJECT,
    PERMANENT,
    TransientApiError,
    api_message,
)

log = logging.getLogger(__name__)
DELETED = {"deleted": True}  # delivered to a subscriber whose object was deleted
_WATCH_S = 240  # server-side lifetime of one watch request
_REFUSALS = 3  # tries before a 401/403/404 is final: ~2 s of backoff in all
FIRST_LIST_TIMEOUT_S = 60.0  # how long a subscriber waits for the collection's first list
PAGE = 500  # objects per list request (the API server's own default chunk size for kubectl is 500)


class ApiRefusal(RuntimeError):
    """A non-2xx answer to a watch request (whose body the client does not check), with its status."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status


def _name(obj: dict) -> str:
    return obj["metadata"]["name"]


def _version(obj: dict | None) -> str | None:
    return obj["metadata"].get("resourceVersion") if obj else None


def _describe(exc: BaseException) -> tuple[int | None, str]:
    """(HTTP status or None, what went wrong in words) for any failure of a list or watch."""
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status and hasattr(exc, "body"):  # the client's ApiException
        return status, f"{status} {api_message(exc)}"
    if isinstance(exc, ApiRefusal):
        return exc.status, str(exc)
    return None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class CollectionWatcher:
    """Lists then watches a namespaced collection with a label selector; fans changes out.

    Args:
        api_factory: returns an async context manager yielding a ``kubernetes_asyncio`` ApiClient.
        path: the collection's template, e.g. ``/apis/kubeflow.org/v2beta1/namespaces/{namespace}/mpijobs``.
        path_params: its parameters (``{"namespace": ...}``), quoted by the client.
        selector: label selector limiting the watch to this provider's jobs.
        key: what a subscriber names an object by (default: its own name); objects it gives None are
            not kept. Kueue's Workloads are filed under the job that owns them.
        slim: what of each object to keep and hand subscribers (default: all of it).
        keep: what of an object to keep (None: nothing, and the object leaves its group); with it,
            subscribers get groups (see the module's docstring), an empty one when nothing is kept.
    """

    _shared: dict[tuple, CollectionWatcher] = {}

    def __init__(self, api_factory: Callable[[], Any], path: str, path_params: dict[str, str], selector: str,
                 key: Callable[[dict], str | None] = _name, keep: Callable[[dict], dict | None] | None = None,
                 slim: Callable[[dict], dict] | None = None):
        self.api_factory = api_factory
        self.path = path
        self.path_params = dict(path_params)
        self.selector = selector
        self.key = key
        self.keep = keep
        self.slim = slim or (lambda obj: obj)
        self.where = path.format(**path_params)  # for messages
        self.objects: dict[str, dict] = {}  # key -> the object, or with ``keep`` the group (never changed in place)
        self.listed = asyncio.Event()  # the first list is in (or the watch failed for good: see failure)
        self.failure: BackendAccessError | None = None
        self.last_error: str | None = None
        self.requests = 0  # list + watch calls made, for the benchmark and the curious
        self._subscribers: dict[str, set[asyncio.Queue]] = {}
        self._task: asyncio.Task | None = None

    @classmethod
    def shared(cls, key: tuple, api_factory: Callable[[], Any], path: str, path_params: dict[str, str],
               selector: str, by: Callable[[dict], str | None] = _name,
               keep: Callable[[dict], dict | None] | None = None,
               slim: Callable[[dict], dict] | None = None) -> CollectionWatcher:
        """The watcher of this collection in this event loop, started by whoever subscribes first."""
        index = (key, path, tuple(sorted(path_params.items())), selector, by, keep, slim)
        watcher = cls._shared.get(index)
        if watcher is None or not watcher.alive():
            watcher = cls._shared[index] = cls(api_factory, path, path_params, selector, by, keep, slim)
        return watcher

    def alive(self) -> bool:
        task = self._task
        return task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop()

    @asynccontextmanager
    async def subscribe(self, name: str, timeout_s: float = FIRST_LIST_TIMEOUT_S):
        """A queue that receives the job's object now (once listed) and after every change; an exception
        put on it (BackendAccessError) ends the subscription. Raises it at once if the watch failed
        for good, TransientApiError if no list came within ``timeout_s``."""
        queue: asyncio.Queue = asyncio.Queue()
        self._subscribers.setdefault(name, set()).add(queue)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"watch {self.where}")
        try:
            try:
                await asyncio.wait_for(self.listed.wait(), timeout_s)
            except asyncio.TimeoutError:
                raise TransientApiError(f"the watch on {self.where} could not list it within {timeout_s:g}s; "
                                        f"last error: {self.last_error or 'none (no answer)'}") from None
            if self.failure is not None:
                raise self.failure
            queue.put_nowait(self.objects.get(name, self._none()))
            yield queue
        finally:
            self._subscribers[name].discard(queue)
            if not self._subscribers[name]:
                del self._subscribers[name]
            if not self._subscribers and self._task is not None:
                self._task.cancel()
                self._task = None

    def _none(self) -> dict:
        """What a subscriber gets when nothing is kept under its key."""
        return DELETED if self.keep is None else {}

    def _deliver(self, name: str, obj: dict | BaseException) -> None:
        for queue in self._subscribers.get(name, ()):
            queue.put_nowait(obj)

    def _fail(self, failure: BackendAccessError) -> None:
        self.failure = failure
        for name in list(self._subscribers):
            self._deliver(name, failure)
        self.listed.set()  # wakes subscribers still waiting for the first list

    async def _run(self) -> None:
        backoff, refusals = 0.5, 0
        while True:
            try:
                async with self.api_factory() as api:
                    version = await self._list(api)
                    backoff, refusals, self.last_error = 0.5, 0, None
                    while version is not None:
                        version = await self._watch(api, version)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure of the stream: classify, back off, re-list
                status, self.last_error = _describe(exc)
                if status in PERMANENT:
                    refusals += 1
                    if refusals >= _REFUSALS:
                        self._fail(BackendAccessError(f"list/watch {self.where}: {self.last_error}"))
                        return
                log.log(logging.INFO if status in PERMANENT else logging.WARNING,
                        "watch on %s failed (%s); re-listing in %.1fs", self.where, self.last_error, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30)

    async def _list(self, api) -> str:
        """List the collection page by page into ``objects``; returns the resourceVersion to watch from."""
        current: dict[str, dict] = {}
        version = await self._pages(api, current)
        while version is None:  # the continuation expired between two pages: list it again, whole
            current = {}
            version = await self._pages(api, current)
        previous, self.objects = self.objects, current
        if self.listed.is_set():  # a re-list: tell subscribers what changed meanwhile
            for name in set(previous) - set(current):
                self._deliver(name, self._none())
            for name, obj in current.items():
                if (_version(previous.get(name)) != _version(obj) if self.keep is None else previous.get(name) != obj):
                    self._deliver(name, obj)
        self.listed.set()  # the first list: each subscriber is handed its object once listed
        return version

    async def _pages(self, api, current: dict[str, dict]) -> str | None:
        """Read every page of one list into ``current``; its resourceVersion, or None when a continue token
        expired (410) and the list must start again."""
        token = ""
        while True:
            self.requests += 1
            query = [("labelSelector", self.selector), ("limit", str(PAGE))] + ([("continue", token)] if token else [])
            try:
                listing = await api.call_api(self.path, "GET", path_params=self.path_params, query_params=query,
                                             response_types_map=OBJECT, auth_settings=["BearerToken"],
                                             header_params={"Accept": "application/json"},
                                             _return_http_data_only=True, _request_timeout=60)
            except Exception as exc:  # noqa: BLE001 - only an expired continuation is handled here
                if token and getattr(exc, "status", None) == 410:
                    log.info("listing %s: the continuation expired; listing it again", self.where)
                    return None
                raise
            for item in listing.get("items") or []:
                self._file(current, item)
            token = (listing.get("metadata") or {}).get("continue") or ""
            if not token:
                return listing["metadata"]["resourceVersion"]

    def _file(self, current: dict[str, dict], item: dict) -> None:
        """Keep what this watcher keeps of a listed ``item`` in ``current``."""
        if (key := self.key(item)) is None:
            return
        if self.keep is None:
            current[key] = self.slim(item)
        elif (kept := self.keep(item)) is not None:
            current.setdefault(key, {})[_name(item)] = kept

    async def _watch(self, api, version: str) -> str | None:
        """Follow changes from ``version``; returns where to continue, or None to re-list (410 Gone)."""
        self.requests += 1
        response = await api.call_api(
            self.path, "GET", path_params=self.path_params, auth_settings=["BearerToken"], _preload_content=False,
            _return_http_data_only=True,
            query_params=[("watch", "true"), ("resourceVersion", version), ("labelSelector", self.selector),
                          ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(_WATCH_S))],
            header_params={"Accept": "application/json"},
            _request_timeout=_WATCH_S + 30,  # the server ends the watch first; then it is resumed, not re-listed
        )
        async with response:
            if response.status != 200:  # unread by the client when the body is streamed
                raise ApiRefusal(response.status, _status_message(await response.read()))
            async for raw in response.content:
                if not raw.strip():
                    continue
                event = json.loads(raw)
                obj = event["object"]
                if event["type"] == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise ApiRefusal(obj.get("code") or 500, obj.get("message") or "watch error")
                version = obj["metadata"].get("resourceVersion", version)
                if event["type"] == "BOOKMARK":
                    continue
                name = self.key(obj)
                if name is None:
                    continue
                if self.keep is not None:
                    self._regroup(name, obj, event["type"] == "DELETED")
                elif event["type"] == "DELETED":
                    self.objects.pop(name, None)
                    self._deliver(name, DELETED)
                else:
                    self.objects[name] = kept = self.slim(obj)
                    self._deliver(name, kept)
        return version

    def _regroup(self, key: str, obj: dict, deleted: bool) -> None:
        """File what is kept of ``obj`` in its group (or take it out), and hand subscribers the new group."""
        group, name = self.objects.get(key, {}), _name(obj)
        kept = None if deleted else self.keep(obj)
        if kept is None and name not in group:
            return
        group = {**group, name: kept} if kept is not None else {k: v for k, v in group.items() if k != name}
        if group:
            self.objects[key] = group
        else:
            self.objects.pop(key, None)
        self._deliver(key, group)


def _status_message(body: bytes) -> str:
    try:
        return json.loads(body).get("message") or body.decode(errors="replace")[:500]
    except ValueError:
        return body.decode(errors="replace")[:500]
