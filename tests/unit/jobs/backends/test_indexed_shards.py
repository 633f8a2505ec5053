"""A sharded job on the indexed-job backend (kubernetes.sharded): its Indexed Job, its plan ConfigMap, its end state
and its result, as the Job controller's fields and status say them."""

from __future__ import annotations

import json

import pytest
import yaml

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.base import JobSubmissionError
from airflow_ml_provider.jobs.backends.kubernetes import sharded
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.jobs.state import JobState, JobStatus


def _spec(count: int = 12, workers: int = 3, inputs: list | None = None, **plan) -> TrainingJobSpec:
    inputs = [[f"s3://b/data/part-{i:05d}.parquet"] for i in range(count)] if inputs is None else inputs
    return TrainingJobSpec(framework="generic", command=["python", "-m", "my_tool"], num_workers=workers, image="img:1",
                           model_dir="s3://b/m", scheduling={"gang": False},
                           shards={"count": count, "output": "s3://b/m/shards", "inputs": inputs,
                                   "max_attempts": 3, "max_failed_shards": 1, **plan})


def _render(spec: TrainingJobSpec, per_index: bool) -> list[dict]:
    backend = get_backend("indexed-job", api_client=None, namespace="ml", per_index_retries=per_index)
    return list(yaml.safe_load_all(backend.render("score", spec, {})))


def test_a_per_index_server_gets_one_indexed_job_of_n_completions_m_at_once_retried_by_the_controller():
    job, plan = _render(_spec(), per_index=True)
    fields = job["spec"]
    assert (fields["completionMode"], fields["completions"], fields["parallelism"]) == ("Indexed", 12, 3)
    assert (fields["backoffLimitPerIndex"], fields["maxFailedIndexes"]) == (2, 1)  # max_attempts - 1, max_failed
    assert "backoffLimit" not in fields, "left to the API server's default under backoffLimitPerIndex (MaxInt32)"
    assert fields["podFailurePolicy"] == {"rules": [{"action": "Ignore", "onPodConditions": [
        {"type": "DisruptionTarget"}]}]}, "a pod taken away spends no try of its shard"
    assert job["metadata"]["labels"][sharded.SHARDED_LABEL] == "true"
    pod = fields["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and "subdomain" not in pod
    (worker,) = pod["containers"]
    assert worker["command"] == ["python", "-m", "airflow_ml_provider.runtime.shard_pod", "--output", "s3://b/m/shards",
                                 "--count", "12", "--max-attempts", "3", "--max-failed", "1", "--per-index", "--inputs",
                                 "/var/run/airflow-ml/shards/inputs.jsonl", "--", "python", "-m", "my_tool"]
    refs = {v["name"]: v["valueFrom"]["fieldRef"]["fieldPath"] for v in worker["env"] if "valueFrom" in v}
    assert refs == {"AIRFLOW_ML_JOB_UID": "metadata.labels['batch.kubernetes.io/controller-uid']",
                    "AIRFLOW_ML_INDEX_FAILURES": "metadata.annotations['batch.kubernetes.io/job-index-failure-count']"}
    assert {"name": "shard-plan", "configMap": {"name": "score"}} in pod["volumes"]
    assert {"name": "shard-plan", "mountPath": "/var/run/airflow-ml/shards", "readOnly": True} in worker["volumeMounts"]
    assert json.loads(job["metadata"]["annotations"][sharded.PLAN_ANNOTATION]) == {
        "count": 12, "output": "s3://b/m/shards", "max_attempts": 3, "max_failed_shards": 1}
    assert plan["kind"] == "ConfigMap" and plan["metadata"]["name"] == "score"
    lines = plan["data"]["inputs.jsonl"].splitlines()
    assert len(lines) == 12 and json.loads(lines[7]) == ["s3://b/data/part-00007.parquet"]
    assert "part-00007" not in json.dumps(job), "the inputs are in the ConfigMap, not in the Job"


def test_an_older_server_gets_no_per_index_fields_and_the_pods_retry_their_shards():
    job, _ = _render(_spec(), per_index=False)
    fields = job["spec"]
    assert not {"backoffLimitPerIndex", "maxFailedIndexes", "podFailurePolicy"} & set(fields)
    assert fields["backoffLimit"] == 9, "lost pods: max_attempts per pod that runs at once"
    (worker,) = fields["template"]["spec"]["containers"]
    assert "--per-index" not in worker["command"]
    refs = {v["name"]: v["valueFrom"]["fieldRef"]["fieldPath"] for v in worker["env"] if "valueFrom" in v}
    assert refs == {"AIRFLOW_ML_JOB_UID": "metadata.labels['controller-uid']"}


def test_parallelism_is_at_most_the_shards_and_a_plan_without_inputs_has_no_config_map():
    manifests = _render(_spec(count=2, workers=5, inputs=[]), per_index=True)
    assert [m["kind"] for m in manifests] == ["Job"]
    assert manifests[0]["spec"]["parallelism"] == 2
    assert "volumes" not in manifests[0]["spec"]["template"]["spec"]
    assert "--inputs" not in manifests[0]["spec"]["template"]["spec"]["containers"][0]["command"]


def test_without_a_server_to_ask_the_backend_renders_the_pod_side_retry():
    backend = get_backend("indexed-job", api_client=None, namespace="ml")
    (job, _) = yaml.safe_load_all(backend.render("score", _spec(), {}))
    assert "backoffLimitPerIndex" not in job["spec"]


@pytest.mark.parametrize(("version", "supported"), [({"major": "1", "minor": "29"}, True),
                                                   ({"major": "1", "minor": "31+"}, True),
                                                   ({"major": "1", "minor": "28"}, False),
                                                   ({"major": "1", "minor": "20"}, False), ({}, False)])
def test_per_index_retries_from_the_servers_version(version, supported):
    assert sharded.per_index_supported(version) is supported


def test_a_server_older_than_indexed_jobs_is_refused_naming_shards():
    sharded.check_indexed({"major": "1", "minor": "22"})
    sharded.check_indexed({})  # unknown: rendered, the pods retrying
    with pytest.raises(ValueError, match=r"^shards: the cluster's Kubernetes v1\.20\.2 has no Indexed Jobs"):
        sharded.check_indexed({"major": "1", "minor": "20", "gitVersion": "v1.20.2"})


def test_a_plan_past_a_config_maps_1_mib_is_refused_naming_shards_inputs():
    long = "s3://b/" + "x" * 4000
    per_shard = len(json.dumps([long], separators=(",", ":"))) + 1
    fits = sharded.CONFIGMAP_MAX_BYTES // per_shard
    (_, plan) = _render(_spec(count=fits, inputs=[[long]] * fits), per_index=True)
    assert len(plan["data"]["inputs.jsonl"].encode()) <= sharded.CONFIGMAP_MAX_BYTES
    with pytest.raises(JobSubmissionError, match=r"^shards\.inputs: 1,0\d\d,\d{3} bytes as the indexed-job backend's "
                                                 r"plan ConfigMap, more than the 1,048,576 a ConfigMap holds"):
        _render(_spec(count=fits + 1, inputs=[[long]] * (fits + 1)), per_index=True)


def test_a_sharded_job_may_not_set_a_worker_port_it_has_no_use_for():
    spec = TrainingJobSpec(**{**_spec().model_dump(), "kubernetes": {"worker_port": 1234}})
    with pytest.raises(JobSubmissionError, match="kubernetes.worker_port: the indexed-job \\(shards\\) backend"):
        _render(spec, per_index=True)


def _job(status: dict, uid: str = "uid-2") -> dict:
    return {"metadata": {"name": "score", "uid": uid, "annotations": {sharded.PLAN_ANNOTATION: json.dumps(
        {"count": 6, "output": "s3://b/m/shards", "max_attempts": 3, "max_failed_shards": 1})}}, "status": status}


def test_failed_indexes_within_max_failed_indexes_is_a_success_and_past_it_a_failure():
    backend = get_backend("indexed-job", api_client=None, namespace="ml")
    within = {"failedIndexes": "4", "conditions": [
        {"type": "FailureTarget", "status": "True", "reason": "FailedIndexes", "message": "Job has failed indexes"},
        {"type": "Failed", "status": "True", "reason": "FailedIndexes", "message": "Job has failed indexes"}]}
    status = backend.job_status(_job(within))
    assert status.state is JobState.SUCCEEDED and "shards 4 failed, within max_failed_shards" in status.message
    past = {"failedIndexes": "1,4", "conditions": [{"type": "Failed", "status": "True",
                                                    "reason": "MaxFailedIndexesExceeded", "message": "exceeded"}]}
    assert backend.job_status(_job(past)).state is JobState.FAILED
    assert "shards 1,4 failed max_attempts times each" in backend.job_status(_job(past)).message
    lost = {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                            "message": "Job has reached the specified backoff limit"}]}
    sharded_job = {**_job(lost), "metadata": {**_job(lost)["metadata"], "labels": {sharded.SHARDED_LABEL: "true"}}}
    told = backend.job_status(sharded_job)
    assert told.state is JobState.FAILED and "more than max_failed_shards shards failed every try" in told.message
    assert "max_failed_shards" not in backend.job_status(_job(lost)).message, "a Job not sharded says what it says"
    done = {"completedIndexes": "0-5", "conditions": [{"type": "Complete", "status": "True"}]}
    assert backend.job_status(_job(done)).state is JobState.SUCCEEDED


def test_the_result_is_a_shard_queues_from_the_markers_the_failure_records_and_the_jobs_failed_indexes():
    committed = {0: {"job": "uid-1", "rows": 10, "attempt": 1},  # by an earlier Job: skipped
                 1: {"job": "uid-2", "rows": 5, "attempt": 1}, 2: {"job": "uid-2", "rows": 7, "attempt": 2},
                 3: {"job": "uid-2", "rows": 1, "attempt": 1}, 5: {"job": "uid-2", "rows": 2, "attempt": 1}}
    failed = {4: {"job": "uid-2", "attempts": 3}, 3: {"job": "uid-2", "attempts": 3},  # 3 committed after all
              5: {"job": "uid-1", "attempts": 3}}
    assert sharded.result(_job({"failedIndexes": "4"}), committed, failed) == {
        "shards": 6, "shards_done": 5, "shards_ran": 4, "shards_skipped": 1, "shards_retried": 3, "shards_failed": 1,
        "failed_shards": [4], "rows": 15}
    assert sharded.indexes("0,2-4,9", 6) == {0, 2, 3, 4}
    unread = sharded.result(_job({"completedIndexes": "0-3,5", "failedIndexes": "4"}), None, {})
    assert (unread["shards_done"], unread["shards_ran"], unread["failed_shards"]) == (5, 5, [4])


def test_the_plan_config_map_and_the_job_are_deleted_with_the_job():
    backend = get_backend("indexed-job", api_client=None, namespace="ml")
    assert ("v1", "ConfigMap") in backend.owned_kinds()
    job, plan = _render(_spec(), per_index=True)
    created = {**job, "metadata": {**job["metadata"], "uid": "u-1"}}
    (owned,) = backend.dependents(created, [plan])
    assert owned["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "score",
                                                     "uid": "u-1"}]


def test_a_running_sharded_jobs_status_counts_its_settled_shards_from_the_watched_object():
    backend = get_backend("indexed-job", api_client=None, namespace="ml")
    job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"completions": 12, "template": {"big": "x" * 1000}},
           "metadata": {"name": "j", "labels": {sharded.SHARDED_LABEL: "true"}},
           "status": {"active": 3, "succeeded": 5, "failedIndexes": "7,9"}}
    watched = backend.watched(job)  # what the shared watch keeps: the count, not the pod template
    assert watched["spec"] == {"completions": 12}
    status = backend.job_status(watched)
    assert status.state is JobState.RUNNING and status.progress == (7, 12)
    assert JobStatus.from_dict(status.to_dict()) == status
    plain = {**watched, "metadata": {"name": "j", "labels": {}}}
    assert backend.job_status(plain).progress is None and "progress" not in backend.job_status(plain).to_dict()
