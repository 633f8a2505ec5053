"""REST addressing shared by the Kubernetes backends, the pod log reader and the watch.

Every name that reaches a REST path (job, namespace, pod, PodGroup) is checked here, in one place,
and paths are templates whose ``{namespace}``/``{name}`` the client fills in and URL-quotes itself
(``call_api(..., path_params=...)``): a name such as ``../../secrets/x`` is refused before any
request, and even an unchecked one could not leave its collection.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import yaml

from airflow_ml_provider.jobs.backends.base import BackendUnavailable
from airflow_ml_provider.patterns import DNS_LABEL, DNS_LABEL_MAX

if TYPE_CHECKING:  # the client itself is imported only by the backends that call the API
    from kubernetes.client.exceptions import ApiException

OBJECT = {200: "object", 201: "object", 202: "object"}  # deserialize any success as plain dicts
_PLURALS = {"MPIJob": "mpijobs", "Job": "jobs", "Service": "services", "PodGroup": "podgroups", "Pod": "pods",
            "Workload": "workloads", "TrainJob": "trainjobs", "JobSet": "jobsets", "ConfigMap": "configmaps"}
_DNS_SUBDOMAIN = re.compile(rf"{DNS_LABEL.pattern}(\.{DNS_LABEL.pattern})*")
RETRYABLE = frozenset({429, 500, 502, 503, 504})  # overload and server-side trouble: worth another try
REFUSED = frozenset({401, 403})  # who we are, what we may do: retrying cannot fix either
PERMANENT = REFUSED | {404}  # ... nor what the server serves (a CRD that is not installed, an object that is gone)


class TransientApiError(BackendUnavailable):
    """The API server kept failing with 429/5xx or dropped connections through every retry."""


def dns_label(field: str, value: object) -> str:
    """``value`` if it is a DNS-1123 label (what Kubernetes requires of namespaces and job names),
    else ValueError naming ``field``."""
    if not isinstance(value, str) or len(value) > DNS_LABEL_MAX or not DNS_LABEL.fullmatch(value):
        raise ValueError(f"{field}: {value!r} is not a DNS-1123 label (at most 63 lowercase letters, digits "
                         "and '-', starting and ending with a letter or digit)")
    return value


def dns_subdomain(field: str, value: object) -> str:
    """``value`` if it is a DNS-1123 subdomain (pod and PodGroup names): as Kubernetes' own check
    (IsDNS1123Subdomain), at most 253 characters in all, with no 63-character limit per part, since
    Volcano names a job's PodGroup ``<job>-<uid>`` (over 63 characters for most of our jobs)."""
    if not isinstance(value, str) or len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(f"{field}: {value!r} is not a DNS-1123 subdomain (at most 253 lowercase letters, "
                         "digits, '-' and '.', each part starting and ending with a letter or digit)")
    return value


def collection_path(api_version: str, kind: str) -> str:
    """The template of a namespaced collection, e.g. ``/apis/kubeflow.org/v2beta1/namespaces/{namespace}/mpijobs``."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{base}/namespaces/{{namespace}}/{_PLURALS[kind]}"


def object_path(api_version: str, kind: str) -> str:
    """The template of one object of the collection: ``.../{name}``."""
    return collection_path(api_version, kind) + "/{name}"


def api_message(exc: ApiException) -> str:
    """The API server's own explanation (e.g. which schema field was rejected, which permission is missing)."""
    try:
        body = exc.body.decode() if isinstance(exc.body, bytes) else exc.body
        return yaml.safe_load(body).get("message") or str(exc.reason)
    except Exception:  # noqa: BLE001 - no body, or an unparsable one: fall back to the status line's reason
        return str(exc.reason)


def missing_object(exc: ApiException, name: str) -> bool:
    """A 404 about the object ``name`` itself, as opposed to its whole collection being unknown (a CRD
    that is not installed): only the former carries the object's name in the Status details."""
    try:
        body = exc.body.decode() if isinstance(exc.body, bytes) else exc.body
        return exc.status == 404 and (yaml.safe_load(body).get("details") or {}).get("name") == name
    except Exception:  # noqa: BLE001 - not a Status object: a plain "404 page not found"
        return False
