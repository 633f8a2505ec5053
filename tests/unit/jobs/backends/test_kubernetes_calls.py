"""REST plumbing of the Kubernetes backends, with injected API errors (the one place a fake is used:
a real API server cannot be made to answer 503 or reset a connection on demand)."""

from __future__ import annotations

import logging

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from airflow_ml_provider.jobs.backends.base import JobSubmissionError
from airflow_ml_provider.jobs.backends.kubernetes.base import TransientApiError
from airflow_ml_provider.jobs.backends.kubernetes.mpijob import MPIJobBackend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState

SPEC = TrainingJobSpec(framework="horovod", command=["python", "t.py"], num_workers=2, image="img:1")


class FlakyApi:
    """Answers each call with the next scripted outcome: an exception to raise or a body to return."""

    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)
        self.calls = []

    def call_api(self, path, method, path_params=None, **kwargs):
        self.calls.append((method, path.format(**(path_params or {}))))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def backend(api) -> MPIJobBackend:
    return MPIJobBackend(api, namespace="ml", retries=4, backoff_s=0.01)


def test_transient_errors_are_retried_until_the_call_goes_through():
    api = FlakyApi(ApiException(status=503, reason="Service Unavailable"), ProtocolError("Connection reset by peer"),
                   ApiException(status=429, reason="Too Many Requests"), {"metadata": {"name": "j"}})
    assert backend(api).submit("j", SPEC, {}) is True
    assert len(api.calls) == 4 and all(call == ("POST", "/apis/kubeflow.org/v2beta1/namespaces/ml/mpijobs")
                                       for call in api.calls)


def test_persistent_transient_errors_give_up_with_the_last_error():
    api = FlakyApi(*[ApiException(status=502, reason="Bad Gateway")] * 4)
    with pytest.raises(TransientApiError, match="502 Bad Gateway"):
        backend(api).submit("j", SPEC, {})
    assert len(api.calls) == 4


def test_a_user_error_fails_fast_with_the_api_servers_message():
    rejected = ApiException(status=422, reason="Unprocessable Entity")
    rejected.body = '{"kind": "Status", "message": "MPIJob.kubeflow.org \\"j\\" is invalid: spec.slotsPerWorker: Invalid"}'
    api = FlakyApi(rejected)
    with pytest.raises(JobSubmissionError, match="spec.slotsPerWorker: Invalid"):
        backend(api).submit("j", SPEC, {})
    assert len(api.calls) == 1, "a 4xx is not retried"


def test_a_pending_job_needs_no_call_to_be_mapped():
    """job_status is pure: the watch hands it objects for every job of a namespace, so it must not call
    the API (it once listed every PodGroup of the namespace per event)."""
    jobs = MPIJobBackend(FlakyApi(), namespace="ml", gang_scheduler="volcano")
    manifest = jobs.manifests("j", SPEC, {})[0]
    assert jobs.job_status(manifest).state is JobState.PENDING
    assert jobs.pod_group(manifest) == ("scheduling.volcano.sh/v1beta1", "j")


def test_a_gang_lookup_that_fails_for_good_degrades_to_no_gang_information(caplog):
    unavailable = ApiException(status=503, reason="Service Unavailable")
    api = FlakyApi(*[unavailable] * 4)
    jobs = MPIJobBackend(api, namespace="ml", retries=4, backoff_s=0.01, gang_scheduler="volcano")
    manifest = jobs.manifests("j", SPEC, {})[0]
    pending = jobs.job_status(manifest)
    with caplog.at_level(logging.WARNING, logger="airflow_ml_provider.jobs.backends.kubernetes.base"):
        assert jobs.read_gang(manifest, pending) is None and jobs.read_gang(manifest, pending) is None
    assert api.calls == [("GET", "/apis/scheduling.volcano.sh/v1beta1/namespaces/ml/podgroups/j")] * 4, \
        "the second lookup is not made: the namespace is not asked again for a while"
    [warning] = [r.getMessage() for r in caplog.records if "gang-scheduling status is not reported" in r.getMessage()]
    assert "failed 4 times; last error: 503 Service Unavailable" in warning
