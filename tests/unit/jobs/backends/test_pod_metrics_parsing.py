"""A cluster's PodMetrics read as the training view's resources sample: Kubernetes quantities in every unit
metrics-server writes (and the others the format allows), pods named by role and index as each backend's controller
names them, and a cluster without the metrics API or refusing it said once by the follow core, never asked again."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from airflow_ml_provider.jobs.backends.base import ResourcesUnavailable
from airflow_ml_provider.jobs.backends.kubernetes.pod_metrics import (
    NO_API,
    REFUSED_NOTE,
    quantity,
    read,
    sample,
    worker_name,
)
from airflow_ml_provider.jobs.backends.kubernetes.pod_template import ROLE_LABEL
from airflow_ml_provider.jobs.follow import Follower
from airflow_ml_provider.jobs.state import JobState, JobStatus


@pytest.mark.parametrize("text,value", [
    ("123456789n", 0.123456789), ("250u", 250e-6), ("250m", 0.25), ("2", 2.0), ("1.5", 1.5), (".5", 0.5),
    ("2k", 2000.0), ("3M", 3e6), ("1G", 1e9), ("1234Ki", 1234 * 1024.0), ("12Mi", 12 * 2.0**20),
    ("1.5Gi", 1.5 * 2.0**30), ("2Ti", 2 * 2.0**40), ("1e3", 1000.0), ("5E-3", 0.005), ("1E", 1e18), ("+7", 7.0),
    ("0", 0.0)])
def test_kubernetes_quantities_are_read_in_base_units(text, value):
    assert math.isclose(quantity(text), value, rel_tol=1e-12)


@pytest.mark.parametrize("text", ["", "n", "12 Ki", "12KiB", "1.2.3", "12ki", "0x10", "1e", "inf", "nan", None, 12])
def test_anything_else_is_no_quantity(text):
    assert quantity(text) is None


@pytest.mark.parametrize("pod,labels,name", [
    ("j-launcher", {ROLE_LABEL: "launcher"}, "launcher"),  # MPIJob (the MPI operator's names)
    ("j-worker-3", {ROLE_LABEL: "worker"}, "worker 3"),
    ("j-master-0", {ROLE_LABEL: "master"}, "master 0"),  # Volcano: <job>-<task>-<index>
    ("j-ps-12", {ROLE_LABEL: "ps"}, "ps 12"),
    ("j-2-x7k2p", {ROLE_LABEL: "worker"}, "worker 2"),  # an Indexed Job's pod, no index label (before 1.28)
    ("j-2-x7k2p", {ROLE_LABEL: "worker", "batch.kubernetes.io/job-completion-index": "2"}, "worker 2"),
    ("j-ps-1-ab3de", {ROLE_LABEL: "ps"}, "ps 1"),  # indexed-job's Job of role ps, <job>-ps
    ("j-node-0-1-ab3de", {"batch.kubernetes.io/job-completion-index": "1"}, "node 1"),  # JobSet's, no role label
    ("j-worker-3", {ROLE_LABEL: "<b>x</b>"}, "worker 3"),  # a role label we did not set: not a name
    ("other", {}, "other"),
])
def test_pods_are_named_by_role_and_index_as_their_controller_names_them(pod, labels, name):
    assert worker_name(pod, "j", labels) == name


def _item(name: str, *usages: tuple[str, str], labels: dict | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels or {}}, "timestamp": "2026-12-03T10:00:00Z",
            "window": "15.004s", "containers": [{"name": f"c{i}", "usage": {"cpu": cpu, "memory": memory}}
                                                for i, (cpu, memory) in enumerate(usages)]}


def test_a_pods_containers_are_summed_and_the_launcher_comes_first():
    items = [_item("j-worker-1", ("500m", "512Mi"), labels={ROLE_LABEL: "worker"}),
             _item("j-worker-0", ("987654321n", "1048576Ki"), ("12345n", "1Mi"), labels={ROLE_LABEL: "worker"}),
             _item("j-launcher", ("1m", "64Mi"), labels={ROLE_LABEL: "launcher"}),
             "not an item", {"metadata": {}}]
    assert sample(items, "j") == {"launcher": {"cpu": 0.1, "mem_mib": 64.0, "pods": 1},
                                  "worker 0": {"cpu": 98.8, "mem_mib": 1025.0, "pods": 1},
                                  "worker 1": {"cpu": 50.0, "mem_mib": 512.0, "pods": 1}}


RUNNING = JobStatus(JobState.RUNNING)


def test_the_follow_core_asks_every_interval_while_the_job_runs_only():
    follower = Follower()
    assert not follower.resources_due(None, RUNNING, 0.0)  # a backend whose log says it (local)
    assert not follower.resources_due(15.0, JobStatus(JobState.PENDING), 0.0)
    assert follower.resources_due(15.0, RUNNING, 0.0)
    follower.resources({"worker 0": {"cpu": 12.5, "mem_mib": 100.0, "pods": 1}}, 0.0, "metrics.k8s.io")
    assert not follower.resources_due(15.0, RUNNING, 14.9)
    assert follower.resources_due(15.0, RUNNING, 15.0)
    follower.resources(None, 15.0, "metrics.k8s.io")  # nothing this time: the last sample stays
    resumed = Follower(state=follower.state)  # a triggerer restart
    assert resumed.tracker.resources == {"at": 0.0, "source": "metrics.k8s.io",
                                         "workers": {"worker 0": {"cpu": 12.5, "mem_mib": 100.0, "pods": 1}}}
    assert not resumed.resources_due(15.0, RUNNING, 29.0) and resumed.resources_due(15.0, RUNNING, 30.0)


def test_a_cluster_without_the_api_is_said_once_and_never_asked_again():
    follower = Follower()
    follower.resources(ResourcesUnavailable(NO_API), 5.0, "metrics.k8s.io")
    step = follower.observe(RUNNING, None, 6.0)
    assert step.warnings == [f"Resource use not shown: {NO_API}"]
    assert follower.observe(RUNNING, None, 7.0).warnings == []
    resumed = Follower(state=follower.state)
    assert not resumed.resources_due(15.0, RUNNING, 1e9)
    assert resumed.tracker.resources == {"at": 5.0, "workers": {}, "source": "metrics.k8s.io", "note": NO_API}


def test_a_sample_past_the_bounds_is_ignored_with_a_warning():
    follower = Follower()
    follower.resources({"<script>": {"cpu": 1.0, "mem_mib": 1.0}}, 1.0, "metrics.k8s.io")
    assert follower.tracker.resources is None
    assert follower.observe(RUNNING, None, 2.0).warnings == [
        "ignored a resources sample from metrics.k8s.io that breaks the bounds of one"]


@pytest.mark.parametrize("code,said", [(503, None), (500, None), (429, None), (404, NO_API),
                                       (403, REFUSED_NOTE.format(status=403))])
def test_an_overloaded_or_failing_server_is_no_sample_this_time_and_a_missing_or_refused_api_a_note(code, said):
    """A loopback HTTP server answering every request with ``code`` (a double of an API server in that state:
    503 is what the aggregator answers while metrics-server is down)."""
    from kubernetes.client import ApiClient, Configuration

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            body = json.dumps({"kind": "Status", "apiVersion": "v1", "code": code, "message": "said"}).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
        with ApiClient(config) as api:
            if said is None:
                assert read(api, "ns", "job=j", "j") is None
            else:
                with pytest.raises(ResourcesUnavailable) as raised:
                    read(api, "ns", "job=j", "j")
                assert str(raised.value) == said
    finally:
        server.shutdown()
