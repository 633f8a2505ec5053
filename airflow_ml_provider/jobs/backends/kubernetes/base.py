"""What every Kubernetes backend shares: REST calls with retries, submit-or-attach, delete, pod logs,
the shared watch behind ``statuses`` and the gang-scheduling lookup.

A backend subclass only says which objects a job is (``manifests``), how the primary object's
status maps onto JobState (``job_status``, pure: no network call) and which PodGroup, if any, a gang
scheduler keeps for it (``pod_group``). What the job's state is, given those objects, ``status.compose``
decides; this module only reads them. Calls go through the generic REST client so one code path
serves custom resources (MPIJob, Volcano Job) and built-in ones (batch/v1 Job, Service).
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import abstractmethod
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import yaml
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from airflow_ml_provider.jobs.backends.base import (
    Backend,
    BackendAccessError,
    JobNotFound,
    JobSubmissionError,
    ResourcesUnavailable,
)
from airflow_ml_provider.jobs.backends.kubernetes import disruption, kueue, pod_metrics
from airflow_ml_provider.jobs.backends.kubernetes.job_pods import (
    JobPods,
    NodeChanged,
    PodsChanged,
    unreadable,
    warn_once,
)
from airflow_ml_provider.jobs.backends.kubernetes.pod_logs import PodLogSource
from airflow_ml_provider.jobs.backends.kubernetes.rest import (
    OBJECT,
    PERMANENT,
    RETRYABLE,
    TransientApiError,
    api_message,
    collection_path,
    dns_label,
    dns_subdomain,
    missing_object,
    object_path,
)
from airflow_ml_provider.jobs.backends.kubernetes.status import Surroundings, compose
from airflow_ml_provider.jobs.backends.kubernetes.watch import DELETED, CollectionWatcher
from airflow_ml_provider.jobs.spec import Framework, TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState, JobStatus
from airflow_ml_provider.labels import JOB_NAME as JOB_NAME_LABEL

__all__ = ["KubernetesBackend", "TransientApiError"]


@dataclass(frozen=True)
class _Workload:
    """A change of the followed job's Kueue Workload (``obj``; DELETED when it has none)."""

    obj: dict


log = logging.getLogger(__name__)
_GANG_PAUSE_S = 300.0  # after a refused PodGroup lookup, how long a connection/namespace stops asking
_GANG_REFRESH_S = 30.0  # how often a follower re-reads the PodGroup of a job that stays pending
_WATCHED_META = ("name", "namespace", "uid", "labels", "creationTimestamp", "resourceVersion")
_no_gang_info: dict[tuple, float] = {}  # (connection, PodGroup apiVersion, namespace) -> ask again after


class KubernetesBackend(Backend):
    """Args:
        api_client: a configured ``kubernetes.client.ApiClient`` (the hook builds it from a connection).
        namespace: where jobs are created.
        retries: attempts for transient errors (429, 5xx, connection resets), with exponential backoff.
        async_api_factory: opens a ``kubernetes_asyncio`` client (an async context manager) on the same
            cluster; with it ``statuses`` follows jobs through the shared watch, without it by polling.
        watch_key: what identifies the cluster connection, so backends built from it share one watch.
        gang_scheduler: the MPI operator's ``--gang-scheduling`` setting (``volcano``, or the name of a
            scheduler-plugins scheduler); None when it runs without one, as a default install does.
            Only MPIJobs use it: Volcano Jobs always have Volcano, Indexed Jobs no gang scheduler.
        queueing: ``kueue`` where Kueue admits the cluster's jobs (see ``kueue``): the job is created
            suspended, labelled with its queue and priority class, and its Workload is followed too.
    """

    api_version: ClassVar[str]
    kind: ClassVar[str]
    frameworks: ClassVar[frozenset[Framework]]
    roles: ClassVar[bool] = False  # renders a job of several roles (TrainingJobSpec.roles, jobs.roles)
    shards: ClassVar[bool] = False  # runs a sharded job (TrainingJobSpec.shards, jobs.shards)
    # The primary object's field that holds it suspended until Kueue admits it; None: Kueue cannot manage the kind.
    suspend_field: ClassVar[tuple[str, ...] | None] = None
    # The spec fields ``pod_group`` and ``job_status`` read: all of its spec that the shared watch keeps of a job
    # (``watched``).
    watched_fields: ClassVar[tuple[tuple[str, ...], ...]] = ()
    # metrics-server's resolution as its manifests deploy it (--metric-resolution=15s, manifests/base/deployment.yaml:28
    # at v0.8.1): asking more often reads the same sample
    resources_every_s = 15.0
    resources_from = "metrics.k8s.io"

    def __init__(self, api_client: ApiClient, namespace: str = "default", retries: int = 5,
                 backoff_s: float = 0.5, async_api_factory: Callable[[], Any] | None = None,
                 watch_key: str | None = None, gang_scheduler: str | None = None, queueing: str | None = None):
        self.api = api_client
        self.namespace = dns_label("namespace", namespace)
        self.retries = retries
        self.backoff_s = backoff_s
        self.async_api_factory = async_api_factory
        self.watch_key = watch_key
        self.gang_scheduler = dns_label("gang_scheduler", gang_scheduler) if gang_scheduler else None
        self.queueing = kueue.queueing(queueing)
        self._resources_off = False  # the metrics API refused or missing: said once, by this backend's first job

    @abstractmethod
    def manifests(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> list[dict]:
        """The objects that make up the job; the first is the one whose status is the job's."""

    @abstractmethod
    def job_status(self, obj: dict) -> JobStatus:
        """Map the primary object's status onto JobState, explicitly for every backend state. Pure:
        gang information (which needs a PodGroup) is added by ``status``/``statuses``."""

    @classmethod
    def watched(cls, obj: dict) -> dict:
        """What the shared watch keeps of a job: what ``job_status``, ``pod_group`` and the pods' ``owned_by``
        read (its identity, status and ``watched_fields``), not its pod templates: a triggerer holding a
        namespace of 10,000 jobs holds a few hundred bytes of each."""
        meta = obj.get("metadata") or {}
        spec: dict = {}
        for path in cls.watched_fields:
            *parents, leaf = path
            found, into = obj.get("spec") or {}, spec
            for part in parents:
                found, into = found.get(part) or {}, into.setdefault(part, {})
            if leaf in found:
                into[leaf] = found[leaf]
        return {"apiVersion": cls.api_version, "kind": cls.kind,
                "metadata": {key: meta[key] for key in _WATCHED_META if key in meta},
                "spec": spec, "status": obj.get("status") or {}}

    def replaces_lost_pods(self, obj: dict) -> bool:
        """Whether the job's own controller gives a lost pod's work a new pod (a sharded Indexed Job: the index gets
        one, and only its shard runs again), so a disrupted pod or a lost node is no preemption of the whole job.
        ``obj`` as the shared watch keeps it (``watched``); False by default."""
        return False

    def pod_group(self, obj: dict) -> tuple[str, str] | None:
        """(apiVersion, name) of the PodGroup a gang scheduler keeps for this job, read from the job's
        own fields, when the job asks to be placed as a gang; None otherwise (the default: no gang)."""
        return None

    def render(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> str:
        return yaml.safe_dump_all(self._checked_manifests(name, spec, labels), sort_keys=False)

    def check_spec(self, spec: TrainingJobSpec) -> None:
        """What this backend requires of a spec before any call (``airflow-ml check`` asks it too).
        Raises JobSubmissionError naming the field."""
        self._check_framework(spec)
        if not spec.image:
            raise JobSubmissionError(f"image: the {self.name} backend needs a container image")

    def _check_framework(self, spec: TrainingJobSpec) -> None:
        """JobSubmissionError naming the backends that run the spec's framework, if this one does not: no
        manifest (submitted, dry-run or rendered) is ever made for a framework its launcher cannot start."""
        if spec.shards is not None and not self.shards:
            from airflow_ml_provider.jobs.backends import sharding_backends

            raise JobSubmissionError(f"shards: the {self.name} backend does not run sharded jobs; backends that do: "
                                     f"{', '.join(sharding_backends())}")
        if spec.roles is not None and not self.roles:
            from airflow_ml_provider.jobs.backends import role_backends

            raise JobSubmissionError(f"roles: the {self.name} backend does not render jobs of several roles; "
                                     f"backends that do: {', '.join(role_backends())}")
        if spec.framework not in self.frameworks:
            from airflow_ml_provider.jobs.backends import backends_for

            raise JobSubmissionError(
                f"framework: the {self.name} backend runs {sorted(f.value for f in self.frameworks)}, "
                f"not {spec.framework.value!r}; backends that run it: {', '.join(backends_for(spec.framework.value))}"
            )

    def submit(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> bool:
        self.check_spec(spec)
        primary, *others = self._checked_manifests(name, spec, labels)
        try:
            created = self._create(primary)
        except ApiException as exc:
            if exc.status != 409:
                raise self._refusal(exc, f"{self.kind} {name} rejected") from None
            if not self.status(name).ended:
                return False  # the same task instance's job is still going: attach to it
            self.delete(name)
            self._wait_gone(primary)
            created = self._create(primary)
        for obj in self.dependents(created, others):
            try:
                self._create(obj)
            except ApiException as exc:
                if exc.status != 409:
                    self.delete(name)
                    raise self._refusal(exc, f"{obj['kind']} {name} rejected") from None
        return True

    def dry_run(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> list[str]:
        """Send every manifest of the job with ``dryRun=All``: the API server validates it (schema, admission
        webhooks, quota, RBAC) and stores nothing. Returns what each object's answer was; raises the
        server's refusal (JobSubmissionError, or BackendAccessError for 401/403 and a missing CRD).
        An object that already exists (409) is reported, not refused: its manifest was not the problem."""
        self.check_spec(spec)
        answers = []
        for obj in self._checked_manifests(name, spec, labels):
            what = f"{obj['kind']} {self.namespace}/{obj['metadata']['name']}"
            try:
                self._call("POST", collection_path(obj["apiVersion"], obj["kind"]), body=obj,
                           query=[("dryRun", "All")])
            except ApiException as exc:
                if exc.status != 409:
                    raise self._refusal(exc, f"{what} rejected (dry run)") from None
                answers.append(f"{what}: exists already (dry run: {api_message(exc)})")
            else:
                answers.append(f"{what}: accepted (dry run, nothing created)")
        return answers

    def status(self, name: str) -> JobStatus:
        """The job's status from one read of each object it depends on, decided by ``status.compose``."""
        obj = self.get(self.kind, name)
        job = self.job_status(obj)
        around = Surroundings(gang=self.read_gang(obj, job), queued=self.queueing is not None,
                              workload=self._read_workload(name) if self.queueing is not None else None,
                              lost=None if job.state.is_terminal or self.replaces_lost_pods(obj)
                              else self._read_lost(obj))
        return compose(job, around)

    def _read_workload(self, name: str) -> dict | None:
        """The job's Kueue Workload, or None: one list (a Workload's name is Kueue's hash, not the job's)."""
        owned = kueue.owner_key(self.api_version, self.kind, name)
        try:
            listing = self._call("GET", collection_path(kueue.WORKLOAD_API, "Workload"))
        except ApiException as exc:
            raise self._refusal(exc, "list Kueue Workloads") from None
        return next((item for item in listing.get("items") or [] if kueue.workload_owner(item) == owned), None)

    def _read_lost(self, obj: dict) -> str | None:
        """Why a pod of the job (owned by it) is disrupted or has lost its node (see ``disruption``), or None:
        one list of the job's pods, and a GET of each node they are bound to. Pods or nodes that cannot be
        read mean no such information (one warning each)."""
        name = obj["metadata"]["name"]
        try:
            pods = self._call("GET", collection_path("v1", "Pod"), query=[("labelSelector", f"{JOB_NAME_LABEL}={name}")])
        except (ApiException, TransientApiError) as exc:
            self._unreadable("pods", exc)
            return None
        owned = [pod for pod in pods.get("items") or [] if disruption.owned_by(pod, obj)]
        if disrupted := next(filter(None, map(disruption.disrupted, owned)), None):
            return disrupted
        try:
            return disruption.first_lost(owned, self._node)
        except (ApiException, TransientApiError) as exc:
            self._unreadable("nodes", exc)
            return None

    def _node(self, name: str) -> dict | None:
        try:
            return self._call("GET", "/api/v1/nodes/{name}", name=dns_subdomain("node", name))
        except ApiException as exc:
            if missing_object(exc, name):
                return None
            raise

    def _unreadable(self, what: str, reason: object) -> None:
        unreadable(self.watch_key or id(self.api), what, self.namespace, reason)

    async def statuses(self, name: str, interval: float) -> AsyncIterator[JobStatus]:
        """From the shared watch of this namespace's jobs (one list+watch per connection, namespace and
        kind): the status at once on every change, else the last one again every ``interval`` seconds.
        A pending job that asks for a gang scheduler has its PodGroup read by a GET by name on each
        change of the job and every 30 s (or ``interval``, if longer) while it stays pending, never
        otherwise: PodGroups are not watched (the MPI operator's carry no labels to select them by,
        and a GET needs only ``get`` permission). The job's pods and the Nodes they are bound to come
        from shared watches too (``job_pods``): a disrupted pod or a lost node makes it PREEMPTED.
        Raises JobNotFound, BackendAccessError (refused list/watch), TransientApiError (no list in 60 s)."""
        if self.async_api_factory is None:
            async for status in super().statuses(name, interval):
                yield status
            return
        name = dns_label("job_name", name)
        watcher = CollectionWatcher.shared(
            (self.watch_key or id(self.async_api_factory),), self.async_api_factory,
            collection_path(self.api_version, self.kind), {"namespace": self.namespace}, JOB_NAME_LABEL,
            slim=type(self).watched)
        obj, workload, lost, gang, gang_at, first = None, None, None, None, None, True
        pods = JobPods(self.async_api_factory, self.watch_key or id(self.async_api_factory), self.namespace, name)
        async with watcher.subscribe(name) as changes, self._workloads(name, changes), pods.following(changes):
            while True:
                try:
                    arrived = [await asyncio.wait_for(changes.get(), interval)]
                except asyncio.TimeoutError:
                    arrived = [None]
                while first and not changes.empty():  # the first status: the job with its Workload and pods
                    arrived.append(changes.get_nowait())
                first = False
                job_changed = False
                for change in arrived:
                    if isinstance(change, BaseException):
                        raise change
                    if isinstance(change, _Workload):
                        workload = None if change.obj is DELETED else change.obj
                    elif isinstance(change, (PodsChanged, NodeChanged)):
                        pods.update(change)
                    elif change is DELETED or (change is None and name not in watcher.objects):
                        # deleted, or not (yet) seen by the watch: ask the API server directly
                        obj, job_changed = await asyncio.to_thread(self.get, self.kind, name), change is not None
                    elif change is not None:
                        obj, job_changed = change, True
                job = self.job_status(obj)
                if job.state is JobState.PENDING and (
                        job_changed or gang_at is None or time.monotonic() - gang_at >= _GANG_REFRESH_S):
                    gang_at, gang = time.monotonic(), await asyncio.to_thread(self.read_gang, obj, job)
                lost = lost or (None if job.state.is_terminal or self.replaces_lost_pods(obj)
                                else pods.reason(obj))  # stays: the job is resubmitted
                yield compose(job, Surroundings(gang=gang, queued=self.queueing is not None, workload=workload,
                                                lost=lost))

    @asynccontextmanager
    async def _workloads(self, name: str, changes: asyncio.Queue):
        """With Kueue, the job's Workload from the shared watch of the namespace's Workloads, put on
        ``changes`` (as ``_Workload``) now and after every change; nothing without queueing."""
        if self.queueing is None:
            yield
            return
        watcher = CollectionWatcher.shared(
            (self.watch_key or id(self.async_api_factory),), self.async_api_factory,
            collection_path(kueue.WORKLOAD_API, "Workload"), {"namespace": self.namespace}, "",
            by=kueue.workload_owner, slim=kueue.watched_workload)

        async def forward(workloads: asyncio.Queue) -> None:
            while True:
                item = await workloads.get()
                changes.put_nowait(item if isinstance(item, BaseException) else _Workload(item))

        async with watcher.subscribe(kueue.owner_key(self.api_version, self.kind, name)) as workloads:
            changes.put_nowait(_Workload(workloads.get_nowait()))  # with the job's first status
            forwarding = asyncio.create_task(forward(workloads))
            try:
                yield
            finally:
                forwarding.cancel()

    def get(self, kind: str, name: str, api_version: str | None = None) -> dict:
        name = dns_label("job_name", name)
        try:
            return self._call("GET", object_path(api_version or self.api_version, kind), name=name)
        except ApiException as exc:
            if missing_object(exc, name):
                raise JobNotFound(f"{kind} {self.namespace}/{name} does not exist (deleted or never created)") from None
            if exc.status in PERMANENT:
                raise self._refusal(exc, f"GET {kind} {self.namespace}/{name}") from None
            raise

    def cancel(self, name: str) -> None:
        """Kubernetes has no 'stop' for these objects: deleting the job stops (and removes) its pods."""
        self.delete(name)

    def delete(self, name: str) -> None:
        name = dns_label("job_name", name)
        for api_version, kind in self.owned_kinds():
            try:
                self._call("DELETE", object_path(api_version, kind), name=name,
                           body={"propagationPolicy": "Background"})
            except ApiException as exc:
                if exc.status != 404:
                    raise self._refusal(exc, f"DELETE {kind} {self.namespace}/{name}") from None

    def dependents(self, primary: dict, others: list[dict]) -> list[dict]:
        """The job's other objects as created after ``primary`` (as the API server returned it): as they are,
        unless a backend makes them the primary's (ownerReferences)."""
        return others

    def owned_kinds(self) -> list[tuple[str, str]]:
        """(apiVersion, kind) of every object named after the job; the primary one first."""
        return [(self.api_version, self.kind)]

    def log_source(self, name: str) -> PodLogSource:
        return PodLogSource(self.api, self.namespace, f"{JOB_NAME_LABEL}={dns_label('job_name', name)}")

    def resource_use(self, name: str) -> dict[str, dict[str, float]] | None:
        """The job's pods' CPU and memory from the cluster's metrics API (``pod_metrics``): one list by its label.
        Once the API is missing or refused, this backend's later jobs (a search's trials share it) are not asked
        and say nothing: the first said why, once."""
        if self._resources_off:
            return None
        name = dns_label("job_name", name)
        try:
            return pod_metrics.read(self.api, self.namespace, f"{JOB_NAME_LABEL}={name}", name)
        except ResourcesUnavailable:
            self._resources_off = True
            raise

    def read_gang(self, obj: dict, job: JobStatus) -> dict | None:
        """The PodGroup of a pending job that asks for a gang (``pod_group``), or None: not pending, no gang,
        not created yet by the controller, or unreadable. A PodGroup that cannot be read (403, or 404 for
        PodGroups the server does not serve, e.g. no Volcano installed) means "no gang information": one
        warning per connection, namespace and kind, and no further lookups there for a while."""
        group = self.pod_group(obj) if job.state is JobState.PENDING else None
        if group is None:
            return None
        api_version, group_name = group
        key = (self.watch_key or id(self.api), api_version, self.namespace)
        if time.monotonic() < _no_gang_info.get(key, 0.0):
            return None
        try:
            return self._call("GET", object_path(api_version, "PodGroup"), name=dns_subdomain("PodGroup name", group_name))
        except ApiException as exc:
            if missing_object(exc, group_name):
                return None  # not created yet by the controller
            reason = f"{exc.status} {api_message(exc)}"
        except (BackendAccessError, TransientApiError) as exc:
            reason = str(exc)
        _no_gang_info[key] = time.monotonic() + _GANG_PAUSE_S
        warn_once(("PodGroups", *key), "PodGroups (%s) in namespace %s cannot be read, so gang-scheduling status "
                  "is not reported (%s)", api_version, self.namespace, reason)
        return None

    def _checked_manifests(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> list[dict]:
        """The manifests, or JobSubmissionError naming the field (job name, framework, option) they cannot be
        made from."""
        self._check_framework(spec)
        try:
            name = dns_label("job_name", name)  # the watch and the pod log reader select by this label
            if self.queueing is None:
                return self.manifests(name, spec, {**labels, JOB_NAME_LABEL: name})
            if self.suspend_field is None:
                raise ValueError(f"queueing: Kueue does not manage {self.kind} objects of the {self.name} backend "
                                 "(no Kueue integration for them); use another backend or unset queueing")
            spec, queue_labels = kueue.queued(spec)
            primary, *others = self.manifests(name, spec, {**labels, JOB_NAME_LABEL: name})
            primary["metadata"]["labels"].update(queue_labels)
            kueue.suspend(primary, self.suspend_field)
            return [primary, *others]
        except ValueError as exc:
            raise JobSubmissionError(str(exc)) from None

    def _refusal(self, exc: ApiException, what: str) -> Exception:
        """BackendAccessError for 401/403 and for a 404 of a whole collection (a CRD not installed),
        else JobSubmissionError: both with the API server's message."""
        if exc.status in PERMANENT:
            hint = " (is its CRD installed?)" if exc.status == 404 else ""
            return BackendAccessError(f"{what}: {exc.status} {api_message(exc)}{hint}")
        return JobSubmissionError(f"{what}: {exc.status} {api_message(exc)}")

    def _create(self, obj: dict) -> dict:
        return self._call("POST", collection_path(obj["apiVersion"], obj["kind"]), body=obj)

    def _wait_gone(self, obj: dict, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                self.get(obj["kind"], obj["metadata"]["name"], obj["apiVersion"])
            except JobNotFound:
                return
            time.sleep(0.5)
        raise TransientApiError(f"{obj['kind']} {obj['metadata']['name']} was not deleted within {timeout_s}s")

    def _call(self, method: str, path: str, name: str | None = None, body: Any = None,
              query: list[tuple[str, str]] | None = None) -> dict:
        """One REST call on ``path`` (a template: the client fills in and quotes the namespace and
        ``name``) with ``query`` parameters; 429/5xx and dropped connections are retried with exponential
        backoff."""
        params = {"namespace": self.namespace, **({"name": name} if name is not None else {})}
        for attempt in range(self.retries):
            try:
                return self.api.call_api(
                    path, method, path_params=params, query_params=query or [], body=body,
                    response_types_map=OBJECT,
                    auth_settings=["BearerToken"],
                    header_params={"Accept": "application/json", "Content-Type": "application/json"},
                    _return_http_data_only=True, _request_timeout=30,
                )
            except ApiException as exc:
                if exc.status not in RETRYABLE:
                    raise
                error = f"{exc.status} {api_message(exc)}"
            except HTTPError as exc:
                error = str(exc)
            if attempt < self.retries - 1:
                log.warning("%s %s failed (%s); retrying", method, path.format(**params), error)
                time.sleep(self.backoff_s * 2**attempt)
        raise TransientApiError(f"{method} {path.format(**params)} failed {self.retries} times; last error: {error}")
