"""A job's pod logs through the Kubernetes pod logs API, merged across pods in time order."""

from __future__ import annotations

from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from airflow_ml_provider.jobs.backends.base import BackendAccessError
from airflow_ml_provider.jobs.backends.kubernetes.rest import (
    OBJECT,
    REFUSED,
    RETRYABLE,
    api_message,
    dns_label,
    dns_subdomain,
)
from airflow_ml_provider.logs.source import LogBatch, LogLine, LogSource, LogSourceUnavailable


def _instant(timestamp: str) -> tuple[str, int]:
    """RFC3339Nano as a sortable (second, nanoseconds): the kubelet trims trailing zeros of fractions."""
    second, _, fraction = timestamp.rstrip("Z").partition(".")
    return second, int((fraction or "0").ljust(9, "0")[:9])


class PodLogSource(LogSource):
    """Every pod of one job (by label selector). The cursor keeps, per pod, the timestamp of the last
    line returned and how many lines carried exactly that timestamp: each read asks the kubelet only
    for lines since that second (``sinceTime``) and drops what was already returned, so a resumed
    reader neither repeats nor replays the whole log."""

    def __init__(self, api_client: ApiClient, namespace: str, selector: str):
        self.api = api_client
        self.namespace = dns_label("namespace", namespace)
        self.selector = selector

    def location(self) -> str:
        return f"the logs of the pods {self.selector} in namespace {self.namespace}, while the pods exist"

    def read(self, cursor: dict[str, Any] | None = None, max_lines: int = 5000) -> LogBatch:
        """Raises LogSourceUnavailable when the API server is overloaded, failing or unreachable,
        BackendAccessError when it refuses (401/403)."""
        try:
            return self._read(cursor, max_lines)
        except ApiException as exc:
            if exc.status in REFUSED:  # e.g. no RBAC for pods or pods/log: waiting cannot fix it
                raise BackendAccessError(f"pod logs in {self.namespace}: {exc.status} {api_message(exc)}") from None
            if exc.status not in RETRYABLE:
                raise
            raise LogSourceUnavailable(f"pod logs in {self.namespace}: {exc.status} {api_message(exc)}") from None
        except HTTPError as exc:
            raise LogSourceUnavailable(f"pod logs in {self.namespace}: {exc}") from None

    def _read(self, cursor: dict[str, Any] | None, max_lines: int) -> LogBatch:
        cursor = {pod: list(position) for pod, position in (cursor or {}).items()}
        fresh: list[tuple[tuple[str, int], str, str, str]] = []
        for pod, container in self._pods():
            last, seen = cursor.get(pod, (None, 0))
            at_last = 0
            for timestamp, text in self._lines(pod, container, last):
                if last is not None:
                    if _instant(timestamp) < _instant(last):
                        continue
                    if timestamp == last:
                        at_last += 1
                        if at_last <= seen:
                            continue
                fresh.append((_instant(timestamp), pod, timestamp, text))
        fresh.sort(key=lambda item: (item[0], item[1]))
        lines = []
        for _, pod, timestamp, text in fresh[:max_lines]:
            last, seen = cursor.get(pod, (None, 0))
            cursor[pod] = [timestamp, seen + 1 if timestamp == last else 1]
            lines.append(LogLine(pod, text))
        return LogBatch(lines, cursor)

    def _pods(self) -> list[tuple[str, str]]:
        pods = self.api.call_api(
            "/api/v1/namespaces/{namespace}/pods", "GET", path_params={"namespace": self.namespace},
            query_params=[("labelSelector", self.selector)],
            response_types_map=OBJECT, auth_settings=["BearerToken"], _return_http_data_only=True,
            header_params={"Accept": "application/json"}, _request_timeout=30,
        )
        return sorted(
            (pod["metadata"]["name"], pod["spec"]["containers"][0]["name"])
            for pod in pods.get("items", []) if pod["spec"].get("nodeName")
        )

    def _lines(self, pod: str, container: str, since: str | None) -> list[tuple[str, str]]:
        query = [("container", container), ("timestamps", "true")]
        if since:
            query.append(("sinceTime", _instant(since)[0] + "Z"))
        try:
            response = self.api.call_api(
                "/api/v1/namespaces/{namespace}/pods/{name}/log", "GET", query_params=query,
                path_params={"namespace": self.namespace, "name": dns_subdomain("pod", pod)},
                auth_settings=["BearerToken"], _preload_content=False, _request_timeout=30,
                header_params={"Accept": "*/*"},
            )
        except ApiException as exc:
            if exc.status in (400, 404):  # container not started yet, or the pod is gone
                return []
            raise
        raw = response[0].data if isinstance(response, tuple) else response.data
        result = []
        for line in raw.decode("utf-8", errors="replace").splitlines():
            timestamp, _, text = line.partition(" ")
            result.append((timestamp, text))
        return result
