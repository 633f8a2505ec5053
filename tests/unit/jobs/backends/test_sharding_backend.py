"""Where a sharded job runs (``jobs.backends.sharding_backend``): the task's backend when it runs sharded jobs, the
cluster's indexed-job for a Kubernetes backend that does not (the pipeline's preprocessing on mpijob or volcano)."""

from __future__ import annotations

from airflow_ml_provider.jobs.backends import BACKENDS, sharding_backend, sharding_backends


def test_a_sharded_job_runs_on_its_own_backend_or_on_the_clusters_indexed_job():
    assert sharding_backends() == ["local", "indexed-job"]
    assert [sharding_backend(name) for name in ("local", "indexed-job")] == ["local", "indexed-job"]
    assert {sharding_backend(name) for name in BACKENDS if name not in sharding_backends()} == {"indexed-job"}
    assert sharding_backend("not-a-backend") == "not-a-backend"  # refused later, naming the known ones


def test_a_local_task_imports_no_kubernetes_backend():
    """A local deployment may lack the kubernetes extra (the wheel deployment test has none): choosing the local
    backend's sharding backend imports no Kubernetes backend module."""
    import subprocess
    import sys

    probe = ("import sys; from airflow_ml_provider.jobs.backends import sharding_backend; "
             "assert sharding_backend('local') == 'local'; "
             "print(sorted(m for m in sys.modules if m.startswith('airflow_ml_provider.jobs.backends.kubernetes')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
