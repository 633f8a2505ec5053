"""What every Kubernetes backend shares: REST calls with retries, submit-or-attach, delete, pod logs.

A backend subclass only says which objects a job is (``manifests``) and how the primary object's
status maps onto JobState (``job_status``). Calls go through the generic REST client so one code
path serves custom resources (MPIJob, Volcano Job) and built-in ones (batch/v1 Job, Service).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from typing import Any, ClassVar

import yaml
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from airflow_ml_provider.jobs.backends.base import Backend, JobNotFound, JobSubmissionError
from airflow_ml_provider.jobs.backends.kube_rest import JOB_NAME_LABEL, OBJECT, api_message, resource_path
from airflow_ml_provider.jobs.backends.pod_logs import PodLogSource
from airflow_ml_provider.jobs.spec import Framework, TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState, JobStatus

_RETRYABLE = {429, 500, 502, 503, 504}


class TransientApiError(RuntimeError):
    """The API server kept failing with 429/5xx or dropped connections through every retry."""


class KubernetesBackend(Backend):
    """Args:
        api_client: a configured ``kubernetes.client.ApiClient`` (the hook builds it from a connection).
        namespace: where jobs are created.
        retries: attempts for transient errors (429, 5xx, connection resets), with exponential backoff.
    """

    api_version: ClassVar[str]
    kind: ClassVar[str]
    frameworks: ClassVar[frozenset[Framework]]

    def __init__(self, api_client: ApiClient, namespace: str = "default", retries: int = 5,
                 backoff_s: float = 0.5):
        self.api = api_client
        self.namespace = namespace
        self.retries = retries
        self.backoff_s = backoff_s

    @abstractmethod
    def manifests(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> list[dict]:
        """The objects that make up the job; the first is the one whose status is the job's."""

    @abstractmethod
    def job_status(self, obj: dict) -> JobStatus:
        """Map the primary object's status onto JobState, explicitly for every backend state."""

    def render(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> str:
        return yaml.safe_dump_all(self.manifests(name, spec, labels), sort_keys=False)

    def submit(self, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> bool:
        if spec.framework not in self.frameworks:
            raise JobSubmissionError(
                f"framework: the {self.name} backend runs {sorted(f.value for f in self.frameworks)}, "
                f"not {spec.framework.value!r}"
            )
        if not spec.image:
            raise JobSubmissionError(f"image: the {self.name} backend needs a container image")
        primary, *others = self.manifests(name, spec, labels)
        try:
            self._create(primary)
        except ApiException as exc:
            if exc.status != 409:
                raise JobSubmissionError(f"{self.kind} {name} rejected: {api_message(exc)}") from None
            if not self.status(name).state.is_terminal:
                return False  # the same task instance's job is still going: attach to it
            self.delete(name)
            self._wait_gone(primary)
            self._create(primary)
        for obj in others:
            try:
                self._create(obj)
            except ApiException as exc:
                if exc.status != 409:
                    self.delete(name)
                    raise JobSubmissionError(f"{obj['kind']} {name} rejected: {api_message(exc)}") from None
        return True

    def status(self, name: str) -> JobStatus:
        obj = self.get(self.kind, name)
        return self.job_status(obj)

    def get(self, kind: str, name: str, api_version: str | None = None) -> dict:
        try:
            return self._call("GET", resource_path(api_version or self.api_version, kind, self.namespace, name))
        except ApiException as exc:
            if exc.status == 404:
                raise JobNotFound(f"{kind} {self.namespace}/{name} does not exist (deleted or never created)") from None
            raise

    def cancel(self, name: str) -> None:
        """Kubernetes has no 'stop' for these objects: deleting the job stops (and removes) its pods."""
        self.delete(name)

    def delete(self, name: str) -> None:
        for api_version, kind in self.owned_kinds():
            try:
                self._call("DELETE", resource_path(api_version, kind, self.namespace, name),
                           body={"propagationPolicy": "Background"})
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def owned_kinds(self) -> list[tuple[str, str]]:
        """(apiVersion, kind) of every object named after the job; the primary one first."""
        return [(self.api_version, self.kind)]

    def log_source(self, name: str) -> PodLogSource:
        return PodLogSource(self.api, self.namespace, f"{JOB_NAME_LABEL}={name}")

    def gang_status(self, obj: dict) -> JobStatus | None:
        """GANG_PENDING with the scheduler's reason when the job's PodGroup cannot be placed whole."""
        uid = obj["metadata"].get("uid")
        groups = self._call("GET", resource_path("scheduling.volcano.sh/v1beta1", "PodGroup", self.namespace))
        for group in groups.get("items", []):
            owners = {ref.get("uid") for ref in group["metadata"].get("ownerReferences", [])}
            if uid in owners or group["metadata"]["name"] == obj["metadata"]["name"]:
                for condition in group.get("status", {}).get("conditions", []):
                    if condition.get("type") == "Unschedulable" and condition.get("status") == "True":
                        reason = condition.get("message") or condition.get("reason") or "gang cannot be scheduled"
                        return JobStatus(JobState.GANG_PENDING, reason)
        return None

    def _create(self, obj: dict) -> dict:
        path = resource_path(obj["apiVersion"], obj["kind"], obj["metadata"]["namespace"])
        return self._call("POST", path, body=obj)

    def _wait_gone(self, obj: dict, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                self.get(obj["kind"], obj["metadata"]["name"], obj["apiVersion"])
            except JobNotFound:
                return
            time.sleep(0.5)
        raise TransientApiError(f"{obj['kind']} {obj['metadata']['name']} was not deleted within {timeout_s}s")

    def _call(self, method: str, path: str, body: Any = None) -> dict:
        """One REST call; 429/5xx and dropped connections are retried with exponential backoff."""
        for attempt in range(self.retries):
            try:
                return self.api.call_api(
                    path, method, body=body, response_types_map=OBJECT, auth_settings=["BearerToken"],
                    header_params={"Accept": "application/json", "Content-Type": "application/json"},
                    _return_http_data_only=True, _request_timeout=30,
                )
            except ApiException as exc:
                if exc.status not in _RETRYABLE:
                    raise
                error = f"{exc.status} {exc.reason}"
            except HTTPError as exc:
                error = str(exc)
            if attempt < self.retries - 1:
                time.sleep(self.backoff_s * 2**attempt)
        raise TransientApiError(f"{method} {path} failed {self.retries} times; last error: {error}")
