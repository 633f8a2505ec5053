"""The contract every backend implements: submit (or re-attach), status, logs, cancel, delete."""

from __future__ import annotations

import asyncio
import re
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import ClassVar

from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobStatus
from airflow_ml_provider.logs.source import LogSource


class JobNotFound(LookupError):
    """The backend has no job of that name (never submitted, deleted, or vanished)."""


class JobSubmissionError(RuntimeError):
    """The backend refused the job for a reason retrying cannot fix (bad image, schema rejection)."""


class BackendAccessError(RuntimeError):
    """A permanent refusal by the backend's API (401/403/404 of a collection, a schema rejection):
    waiting or retrying cannot fix it, so a follower fails at once with this message."""


class BackendUnavailable(RuntimeError):
    """The backend's server could not be reached, or kept failing through every retry: an Airflow retry may
    find it back. The message says where, in one line (the connection, the server)."""


class ResourcesUnavailable(RuntimeError):
    """The backend cannot say what a job's workers use (a cluster without the metrics API, or one that refuses
    it): said once, in the message's words, and not asked again for that job."""


def one_line(exc: BaseException) -> str:
    """An error's message on one line, without the object addresses urllib3 puts in its (``<...HTTPSConnection
    object at 0x7f...>: Failed to establish a new connection: [Errno 111] Connection refused``)."""
    return " ".join(re.sub(r"<[^<>]* object at 0x[0-9a-f]+>:? ?", "", str(exc)).split())


class Backend(ABC):
    """Runs TrainingJobSpecs. Jobs are addressed by a deterministic name, so submitting a name whose
    job is still active attaches to it instead of starting a second one."""

    where: str = ""  # where its jobs run, for messages (the hook names a cluster's connection and server)

    name: ClassVar[str]
    resources_every_s: ClassVar[float | None] = None  # how often ``resource_use`` is asked (None: never)
    resources_from: ClassVar[str | None] = None  # what ``resource_use`` reads, as the view names it

    @abstractmethod
    def submit(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> bool:
        """Start the job, or attach to the active job of that name. Returns True if it started one.

        A finished job of the same name is archived (local) or replaced (cluster) first.
        """

    @abstractmethod
    def status(self, name: str) -> JobStatus:
        """The job's normalized status. Raises JobNotFound."""

    @abstractmethod
    def cancel(self, name: str) -> None:
        """Stop every worker of the job; a no-op for a finished or unknown job."""

    @abstractmethod
    def delete(self, name: str) -> None:
        """Cancel the job if active and remove what the backend keeps of it."""

    @abstractmethod
    def log_source(self, name: str) -> LogSource:
        """The job's own log, read in order from a cursor."""

    @abstractmethod
    def render(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> str:
        """What submit would create (a manifest, or the launch plan), for review without running it."""

    async def statuses(self, name: str, interval: float) -> AsyncIterator[JobStatus]:
        """The job's status now, then again on every change and at least every ``interval`` seconds
        (so a follower reads new log lines meanwhile). Polling by default; the Kubernetes backends
        override it with the shared watch. Raises JobNotFound / BackendAccessError like ``status``."""
        while True:
            yield await asyncio.to_thread(self.status, name)
            await asyncio.sleep(interval)

    def heartbeat(self, name: str) -> None:
        """A follower of the job is alive. Backends whose jobs outlive an abandoned owner (local) use
        it to stop orphans; the default does nothing (cluster jobs carry their own deadline)."""

    def job_result(self, name: str) -> dict | None:
        """What the job's result is where its log does not say it (its own objects do: a sharded Indexed Job's
        shards), merged into the task's metrics once the job succeeded; None: its log's ``result`` line says it."""
        return None

    def resource_use(self, name: str) -> dict[str, dict[str, float]] | None:
        """What the job's workers use now (``{"worker 0": {"cpu": 98.5, "mem_mib": 412.3}, ...}``: percent of a
        core, MiB), asked by the follow core every ``resources_every_s`` seconds while the job runs; None: nothing
        this time. Raises ResourcesUnavailable when it never can. Backends whose job log carries the sample (the
        local launcher's ``resources`` lines) leave ``resources_every_s`` None and are never asked."""
        return None

    def default_artifact_dir(self, name: str) -> str | None:
        """Where a job keeps its model and checkpoints when the task names no directory."""
        return None
