"""A followed job's pods and the Nodes they are bound to, from shared watches: what makes a job PREEMPTED
through the watch (a disrupted pod, a pod whose node is lost: see ``disruption``) with no per-job read.

The namespace's pods are watched once (kept: those disrupted or bound to a node, slimmed, filed by job);
the cluster's Nodes once per connection (kept: name and taints), which a follower subscribes to by the
names of the nodes its job's pods are bound to, as they appear. Pods or Nodes that cannot be watched
(no ``list``/``watch`` permission) mean no such information: one warning, the job followed without it,
and a refused Node watch not tried again for a while.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from airflow_ml_provider.jobs.backends.base import BackendAccessError
from airflow_ml_provider.jobs.backends.kubernetes import disruption
from airflow_ml_provider.jobs.backends.kubernetes.rest import TransientApiError, api_message, collection_path
from airflow_ml_provider.jobs.backends.kubernetes.watch import CollectionWatcher
from airflow_ml_provider.labels import JOB_NAME as JOB_NAME_LABEL

log = logging.getLogger(__name__)
NODES_PAUSE_S = 300.0  # after a refused Node watch, how long a connection stops asking
_no_node_info: dict[Any, float] = {}  # connection -> ask again after
_warned: set[tuple] = set()


@dataclass(frozen=True)
class PodsChanged:
    """The followed job's watched pods changed: all of them now (``{name: pod}``)."""

    pods: dict[str, dict]


@dataclass(frozen=True)
class NodeChanged:
    """A Node the job's pods are bound to changed (``node``; None: it does not exist)."""

    name: str
    node: dict | None


def warn_once(key: tuple, message: str, *args: object) -> None:
    """Log ``message`` the first time ``key`` (connection, collection, namespace) is found unreadable in this
    process: a follower asks again every few seconds, and one warning says all there is to say."""
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)


def unreadable(connection: Any, what: str, namespace: str, reason: object) -> None:
    """One warning per connection, namespace and collection (pods, nodes) that cannot be read."""
    if isinstance(reason, ApiException):
        reason = f"{reason.status} {api_message(reason)}"
    where = f"in namespace {namespace} " if what == "pods" else ""
    warn_once((connection, what, namespace), "%s %scannot be read, so a disrupted (spot, evicted) pod or one whose "
              "node is gone is not reported as PREEMPTED (%s)", what, where, reason)


class JobPods:
    """The pods of job ``name`` and their Nodes, put on the follower's queue (``PodsChanged``,
    ``NodeChanged``) by ``following``; the follower hands each back to ``update`` and asks ``reason``."""

    def __init__(self, api_factory: Callable[[], Any], connection: Any, namespace: str, name: str):
        self.api_factory, self.connection, self.namespace, self.name = api_factory, connection, namespace, name
        self.changes: asyncio.Queue | None = None
        self.pods: dict[str, dict] = {}
        self.nodes: dict[str, dict | None] = {}  # the Nodes heard of so far
        self._nodes_followed: dict[str, asyncio.Task] = {}

    @asynccontextmanager
    async def following(self, changes: asyncio.Queue):
        """Subscribed to the namespace's shared pod watch while inside; the job's pods go on ``changes`` now
        and after every change, the Nodes they are bound to as they are heard of."""
        self.changes = changes
        watcher = CollectionWatcher.shared(
            (self.connection,), self.api_factory, collection_path("v1", "Pod"), {"namespace": self.namespace},
            JOB_NAME_LABEL, by=disruption.job_of, keep=disruption.watched_pod)

        async def forward(pods: asyncio.Queue) -> None:
            while not isinstance(item := await pods.get(), BaseException):
                self.changes.put_nowait(PodsChanged(item))
            unreadable(self.connection, "pods", self.namespace, item)

        async with AsyncExitStack() as stack:
            stack.callback(lambda: [task.cancel() for task in self._nodes_followed.values()])
            try:
                pods = await stack.enter_async_context(watcher.subscribe(self.name))
            except (BackendAccessError, TransientApiError) as exc:
                unreadable(self.connection, "pods", self.namespace, exc)
            else:
                self.changes.put_nowait(PodsChanged(pods.get_nowait()))  # with the job's first status
                stack.callback(asyncio.create_task(forward(pods)).cancel)
            yield

    def update(self, change: PodsChanged | NodeChanged) -> None:
        if isinstance(change, NodeChanged):
            self.nodes[change.name] = change.node
            return
        self.pods = change.pods
        for pod in self.pods.values():
            where = disruption.node_name(pod)
            if where and where not in self._nodes_followed and time.monotonic() >= _no_node_info.get(self.connection, 0):
                self._nodes_followed[where] = asyncio.create_task(self._follow_node(where), name=f"node {where}")

    def reason(self, job: dict | None) -> str | None:
        """Why a pod of ``job`` (owned by it) can no longer run, from what the watches said; None: every pod can."""
        owned = [pod for pod in self.pods.values() if disruption.owned_by(pod, job)]
        if disrupted := next(filter(None, map(disruption.disrupted, owned)), None):
            return disrupted
        known = [pod for pod in owned if disruption.node_name(pod) in self.nodes]
        return disruption.first_lost(known, self.nodes.get)

    async def _follow_node(self, name: str) -> None:
        """Put Node ``name`` on ``changes`` now and after every change, from the connection's shared Node watch."""
        watcher = CollectionWatcher.shared((self.connection,), self.api_factory, "/api/v1/nodes", {}, "",
                                           keep=disruption.watched_node)
        try:
            async with watcher.subscribe(name) as nodes:
                while not isinstance(item := await nodes.get(), BaseException):
                    self.changes.put_nowait(NodeChanged(name, item.get(name)))
                failure: object = item
        except (BackendAccessError, TransientApiError) as exc:
            failure = exc
        _no_node_info[self.connection] = time.monotonic() + NODES_PAUSE_S
        unreadable(self.connection, "nodes", self.namespace, failure)
