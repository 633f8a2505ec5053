"""The Elasticsearch holding training jobs' logs, through the standard ``elasticsearch`` connection type."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

from airflow_ml_provider.jobs.backends.base import Backend
from airflow_ml_provider.logs.ecs import LOCAL_NAMESPACE, EcsFields
from airflow_ml_provider.logs.source import LogSource

if TYPE_CHECKING:  # the client is imported when a connection is used, not when a DAG file is parsed
    from elasticsearch import Elasticsearch

    from airflow_ml_provider.logs.elasticsearch import ElasticsearchLogSource

DEFAULT_INDEX_PATTERN = "filebeat-*"


class ElasticsearchLogsHook(BaseHook):
    """Builds an Elasticsearch client and log sources from an ``elasticsearch`` connection.

    Connection fields: host (a name, or a URL such as ``https://es.example.com:9243``), port (9200),
    schema (``http``/``https``; also extra ``scheme``), login/password for basic auth. Extras:
    ``api_key`` (instead of login/password), ``index_pattern`` (``filebeat-*``), ``fields`` (EcsFields
    overrides for documents not laid out by Filebeat, e.g. ``{"job": "labels.job"}``), ``settle_s``
    (5: how long after a job ended its last lines may still arrive), ``overlap_s`` (60: how late a line
    may arrive and still be delivered), ``verify_certs``, ``ca_certs``, ``request_timeout`` (10).

    Credentials go to the client only: they are registered with Airflow's secrets masker and never
    logged, returned or put in XCom. Nothing connects until the first request, so building the hook
    at DAG parse time costs no network call.
    """

    conn_name_attr = "elasticsearch_conn_id"
    default_conn_name = "elasticsearch_default"
    conn_type = "elasticsearch"
    hook_name = "Elasticsearch (training logs)"

    def __init__(self, elasticsearch_conn_id: str = default_conn_name):
        super().__init__()
        self.elasticsearch_conn_id = elasticsearch_conn_id

    @cached_property
    def _settings(self) -> dict[str, Any]:
        conn = self.get_connection(self.elasticsearch_conn_id)
        extras = conn.extra_dejson
        for secret in (conn.password, extras.get("api_key")):
            if secret:
                mask_secret(secret)
        try:
            fields = EcsFields.from_dict(extras.get("fields"))
            settle_s, overlap_s = _seconds(extras, "settle_s", 5.0), _seconds(extras, "overlap_s", 60.0)
        except ValueError as exc:
            raise ValueError(f"connection {self.elasticsearch_conn_id!r}: extra {exc}") from None
        client_args: dict[str, Any] = {
            "request_timeout": float(extras.get("request_timeout", 10)),
            "max_retries": 1,  # longer outages are ridden out by the caller, with backoff and a grace period
            "retry_on_timeout": True,
        }
        if extras.get("api_key"):
            client_args["api_key"] = extras["api_key"]
        elif conn.login:
            client_args["basic_auth"] = (conn.login, conn.password or "")
        for name in ("verify_certs", "ca_certs"):
            if name in extras:
                client_args[name] = extras[name]
        return {
            "url": _url(conn.host, conn.port, conn.schema or extras.get("scheme")),
            "client_args": client_args,
            "index": extras.get("index_pattern") or DEFAULT_INDEX_PATTERN,
            "fields": fields,
            "settle_s": settle_s,
            "overlap_s": overlap_s,
        }

    @property
    def url(self) -> str:
        """Where the cluster is, without credentials (safe to log)."""
        return self._settings["url"]

    def get_conn(self) -> Elasticsearch:
        return self.client

    @cached_property
    def client(self) -> Elasticsearch:
        from elasticsearch import Elasticsearch

        return Elasticsearch(self.url, **self._settings["client_args"])

    def log_source(self, job: str, namespace: str | None = None,
                   index: str | None = None) -> ElasticsearchLogSource:
        """The log of one job (its label value), optionally one namespace's, from ``index`` or the
        connection's index pattern."""
        from airflow_ml_provider.logs.elasticsearch import ElasticsearchLogSource

        settings = self._settings
        return ElasticsearchLogSource(self.client, index or settings["index"], job, namespace=namespace,
                                      fields=settings["fields"], settle_s=settings["settle_s"],
                                      overlap_s=settings["overlap_s"])


def job_log_source(backend: Backend, name: str, elasticsearch_conn_id: str | None) -> LogSource:
    """A training job's log for the operators and their trigger: from Elasticsearch when a connection is
    configured, else the backend's own (the local backend's files, the pods' logs). Outages of the
    store are the follow core's to ride out (``Follower.unavailable``).

    From Elasticsearch, only the backend's namespace is read: a Kubernetes backend's own, and for the local
    backend (no namespace of its own) ``LOCAL_NAMESPACE``, the one its jobs' documents are shipped with.
    So a pod of another namespace carrying the same job label cannot inject lines into either."""
    if not elasticsearch_conn_id:
        return backend.log_source(name)
    namespace = getattr(backend, "namespace", None) or LOCAL_NAMESPACE
    return ElasticsearchLogsHook(elasticsearch_conn_id).log_source(name, namespace)


def _url(host: str | None, port: int | None, scheme: str | None) -> str:
    """``scheme://host:port`` from connection fields; any credentials written into the host are dropped."""
    if not host:
        raise ValueError("the Elasticsearch connection has no host")
    parts = urlsplit(host if "://" in host else f"//{host}")
    scheme = scheme or parts.scheme or "http"
    if scheme not in ("http", "https"):
        raise ValueError(f"the Elasticsearch connection's scheme must be http or https, got {scheme!r}")
    return f"{scheme}://{parts.hostname}:{port or parts.port or 9200}{parts.path.rstrip('/')}"


def _seconds(extras: dict[str, Any], name: str, default: float) -> float:
    value = extras.get(name, default)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not seconds >= 0:
        raise ValueError(f"{name}: a number of seconds >= 0, got {value!r}")
    return seconds
