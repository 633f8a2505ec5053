"""A cluster reached through a cncf-kubernetes connection, as the Kubernetes backends use it: its API client,
without urllib3's own retries (the backends retry each call themselves; urllib3 logged a warning per inner
retry, 19 for one task against an unreachable server), the namespace the connection's kubeconfig context names
when the connection sets none (it used ``default`` although the context said ``ml``), and where that is, in
words a refusal can name."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class Cluster:
    api: Any  # kubernetes.client.ApiClient
    namespace: str | None  # the connection's, else its kubeconfig context's (in a pod: its service account's)
    where: str  # "Kubernetes connection 'kubernetes_default' (server https://...)"


def cluster(conn_id: str) -> Cluster:
    """The cluster of the cncf-kubernetes connection ``conn_id``."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    hook = KubernetesHook(conn_id=conn_id)
    api = hook.api_client
    api.rest_client.pool_manager.connection_pool_kw["retries"] = False  # pools are made on first use, with these
    return Cluster(api, hook.get_namespace() or context_namespace(hook),
                   f"Kubernetes connection {conn_id!r} (server {api.configuration.host})")


def context_namespace(hook) -> str | None:
    """The namespace of the kubeconfig context ``hook``'s connection uses (its ``cluster_context``, else the
    kubeconfig's current-context), of the kubeconfig it names (file or content) or the default one; in a pod
    (``in_cluster``), its service account's."""
    import yaml
    from kubernetes.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION

    field = hook._get_field  # the cncf provider's reader of its extras (prefixed or not)
    if hook.in_cluster or field("in_cluster"):
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or None if SERVICE_ACCOUNT_NAMESPACE.is_file() else None
    content = field("kube_config")
    if content is None:
        path = hook.config_file or field("kube_config_path") or os.environ.get("KUBECONFIG", KUBE_CONFIG_DEFAULT_LOCATION)
        path = Path(os.path.expanduser(str(path).split(os.pathsep)[0]))
        content = path.read_text() if path.is_file() else None
    kubeconfig = yaml.safe_load(content) if isinstance(content, str) else content
    if not isinstance(kubeconfig, dict):
        return None
    chosen = hook.cluster_context or field("cluster_context") or kubeconfig.get("current-context")
    for entry in kubeconfig.get("contexts") or []:
        if isinstance(entry, dict) and entry.get("name") == chosen:
            namespace = (entry.get("context") or {}).get("namespace")
            return namespace if isinstance(namespace, str) and namespace else None
    return None
