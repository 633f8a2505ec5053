"""Where a check sends each job: the backend it would run on (or ``--backend``), rendered without a
cluster; a cluster job's manifests validated offline (jobs/backends/kubernetes/schemas.py: the oldest and newest
supported Kubernetes' strict schemas, the pinned CRDs); with ``--server-dry-run`` every manifest also sent to the
API server with ``dryRun=All``."""

from __future__ import annotations

import os
from typing import Any

import yaml

from airflow_ml_provider.hooks.training_backend import (  # what JobSetup.image answers
    TrainingBackendHook,
    image_for,
)
from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.base import Backend, JobSubmissionError
from airflow_ml_provider.jobs.backends.kubernetes import schemas
from airflow_ml_provider.jobs.spec import TrainingJobSpec


class Targets:
    """Backends by name for one check run.

    Args:
        backend: every job goes to this backend instead of the one its task or recipe names.
        server: ``--server-dry-run``: a kubeconfig file, or the id of a Kubernetes connection.
        namespace: where the dry run creates nothing; default: the ml_training connection's ``namespace``
            extra, else the kubeconfig's or connection's namespace, else ``default``.
    """

    def __init__(self, backend: str | None = None, server: str | None = None, namespace: str | None = None):
        self.override = backend or None
        self.hook = TrainingBackendHook()
        self.server = server
        self._namespace = namespace
        self._client: Any = None
        self._backends: dict[str, Backend] = {}

    def name(self, wanted: str | None) -> str:
        """The backend a job runs on: ``--backend``, else the task's, else the connection's default."""
        return self.override or self.hook.backend_name(wanted or None)

    def backend(self, name: str) -> Backend:
        if name not in self._backends:
            if name == "local":
                self._backends[name] = self.hook.get_backend("local")
            else:
                client, namespace = self._cluster()
                self._backends[name] = get_backend(name, api_client=client, namespace=namespace)
        return self._backends[name]

    def with_image(self, backend: Backend, spec: TrainingJobSpec) -> TrainingJobSpec:
        """``spec`` with the connection's image for its framework where it names none, as the run fills it in
        (``JobRunner.build_spec``: the job's own image, else the connection's ``image_<framework>``/``image``)."""
        if spec.image:
            return spec
        image = image_for(self.hook.settings().images(), backend.name, spec.framework.value)
        return TrainingJobSpec(**{**spec.model_dump(), "image": image}) if image else spec

    def check(self, backend: Backend, name: str, spec: TrainingJobSpec, labels: dict[str, str]) -> list[str]:
        """Render the job (raises what the backend refuses); a cluster job's manifests validated offline against
        the supported Kubernetes releases and the pinned CRDs (raises every error found), then dry-run with a
        server. Returns what was done."""
        rendered = backend.render(name, spec, labels)
        check_spec = getattr(backend, "check_spec", None)
        if check_spec is None:
            return [f"{name}: rendered for backend {backend.name}"]
        check_spec(spec)
        objs = [obj for obj in yaml.safe_load_all(rendered) if obj]
        if problems := schemas.validate_all(objs):
            raise JobSubmissionError(f"offline validation: {'; '.join(problems)}")
        versions = " and ".join(schemas.KUBERNETES_VERSIONS)
        done = [f"{name}: rendered for backend {backend.name}; {len(objs)} manifest(s) valid offline (Kubernetes "
                f"{versions}, the pinned CRDs)"]
        if self.server is None:
            return done
        return [*done, *backend.dry_run(name, spec, labels)]

    def _cluster(self) -> tuple[Any, str]:
        """(API client, namespace): no client without ``--server-dry-run`` (manifests are only rendered)."""
        namespace = self._namespace or self.hook.settings().namespace
        if self.server is None:
            return None, namespace or "default"
        if self._client is None:
            if os.path.isfile(self.server):
                from kubernetes import config

                self._client = config.new_client_from_config(self.server)
                if not namespace:
                    _, active = config.list_kube_config_contexts(self.server)
                    namespace = (active or {}).get("context", {}).get("namespace")
            else:
                from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

                kubernetes = KubernetesHook(conn_id=self.server)
                self._client = kubernetes.api_client
                namespace = namespace or kubernetes.get_namespace()
            self._namespace = namespace or "default"
        return self._client, self._namespace
