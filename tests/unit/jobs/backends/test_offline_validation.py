"""Issue 39: offline validation (jobs/backends/kubernetes/schemas.py), what `airflow-ml check` runs on every cluster
job: built-in kinds against the strict schemas of the oldest and newest supported Kubernetes (kubernetes-validate),
CRD instances against the pinned CRDs' openAPIV3Schema with undeclared fields as errors (what a server prunes).

Every backend x framework the docs claim, with the variants that change a manifest (elastic, Kueue, GPU, volumes,
secrets, pull secrets, restricted pods, 1 and 12 workers), passes; a manifest that gains an undeclared field or a
field of the wrong type fails, naming the field and the schema; the package's CRD copy is the lock's, and a copy
that is not is refused. The objects the tests' controller stand-ins make (a TrainJob's JobSet, Kueue's Workload)
and the shipped deploy/ manifests pass too, so the stand-ins play with objects a real server would keep whole."""

from __future__ import annotations

import copy
import gzip
import hashlib
import shutil

import pytest
import yaml
from trainer_controller import AIRFLOW_ML_TORCH, TORCH_DISTRIBUTED, jobset_for

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.kubernetes import schemas
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from support import REPO

RUNS = [("mpijob", "horovod"), ("mpijob", "generic"), ("volcano", "horovod"), ("volcano", "lightgbm"),
        ("volcano", "pytorch"), ("volcano", "generic"), ("indexed-job", "lightgbm"), ("indexed-job", "pytorch"),
        ("indexed-job", "generic"), ("trainjob", "pytorch"), ("volcano", "xgboost"), ("indexed-job", "xgboost")]
ELASTIC = [("mpijob", "horovod"), ("volcano", "horovod")]
KUEUE = ["mpijob", "indexed-job", "trainjob"]  # Volcano Jobs are refused with queueing: kueue
FULL = {"resources": {"cpu": 2, "memory": "4Gi", "gpu": 1, "gpu_type": "Tesla-T4"}, "timeout_s": 3600,
        "env": {"OMP_NUM_THREADS": "1"}, "scheduling": {"gang": False},
        "kubernetes": {"volumes": [{"name": "data", "mount_path": "/data", "claim": "datasets", "read_only": True}],
                       "secret_env": {"TOKEN": {"secret": "s3-credentials", "key": "token"}},
                       "image_pull_secrets": ["registry"], "service_account": "trainer",
                       "node_selector": {"cloud.google.com/gke-spot": "true"},
                       "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoExecute",
                                        "toleration_seconds": 60}]}}


def spec(framework: str, workers: int = 2, **fields) -> TrainingJobSpec:
    return TrainingJobSpec(**{"framework": framework, "command": ["python", "-m", "train"], "num_workers": workers,
                              "image": "registry.example/train:cpu", **fields})


def manifests(kind: str, job: TrainingJobSpec, **backend) -> list[dict]:
    """What the backend submits (and `airflow-ml check` validates): its render, Kueue's labels and suspension in."""
    rendered = get_backend(kind, api_client=None, namespace="ml", **backend).render("job", job, {"team": "a"})
    return [obj for obj in yaml.safe_load_all(rendered) if obj]


def variants():
    for kind, framework in RUNS:
        for workers in (1, 12):
            yield pytest.param(kind, spec(framework, workers), {}, id=f"{kind}-{framework}-{workers}")
        yield pytest.param(kind, spec(framework, **FULL), {}, id=f"{kind}-{framework}-full")
        if (kind, framework) not in {("mpijob", "horovod"), ("mpijob", "generic"), ("volcano", "horovod")}:
            restricted = spec(framework, kubernetes={"pod_security": "restricted"})
            yield pytest.param(kind, restricted, {}, id=f"{kind}-{framework}-restricted")
    for kind, framework in ELASTIC:
        yield pytest.param(kind, spec(framework, 4, min_workers=2, max_workers=6), {}, id=f"{kind}-{framework}-elastic")
    for kind in KUEUE:
        framework = "pytorch" if kind == "trainjob" else "generic"
        queued = spec(framework, scheduling={"queue": "team-a", "priority_class": "high"})
        yield pytest.param(kind, queued, {"queueing": "kueue"}, id=f"{kind}-{framework}-kueue")


@pytest.mark.parametrize("kind,job,backend", variants())
def test_every_rendered_manifest_is_valid_for_the_supported_range(kind, job, backend):
    objs = manifests(kind, job, **backend)
    assert schemas.validate_all(objs) == []
    for obj in objs:  # each kind reached the schema it is checked by: a CRD's, or Kubernetes' own
        found = schemas.crd_schema(obj["apiVersion"], obj["kind"])
        assert (found is not None) == (kind != "indexed-job"), obj["kind"]


def test_the_checked_releases_are_the_oldest_and_newest_the_docs_support():
    assert schemas.KUBERNETES_VERSIONS == ("1.29", "1.37")
    cluster = (REPO / "docs" / "cluster.md").read_text()
    assert "Kubernetes 1.29 to 1.37" in cluster


@pytest.mark.parametrize("version", [f"1.{minor}" for minor in range(29, 38)])
def test_every_release_between_accepts_the_built_in_kinds(version):
    """The two ends stand for the range: each release in it accepts the Indexed Job and its Service too."""
    for framework in ("lightgbm", "pytorch", "generic"):
        assert schemas.validate_all(manifests("indexed-job", spec(framework, **FULL)), (version,)) == []


def _first_container(obj: dict) -> dict:
    spec_ = obj["spec"]
    template = {"MPIJob": lambda: spec_["mpiReplicaSpecs"]["Worker"]["template"],
                "Job": lambda: spec_["tasks"][0]["template"] if "tasks" in spec_ else spec_["template"]}
    if obj["kind"] == "TrainJob":
        return spec_["trainer"]
    return template[obj["kind"]]()["spec"]["containers"][0]


@pytest.mark.parametrize("kind,framework,schema", [
    ("mpijob", "horovod", "CRD kubeflow/mpi-operator@v0.8.0"), ("volcano", "lightgbm", "CRD volcano-sh/volcano@"),
    ("indexed-job", "lightgbm", "Kubernetes 1.29"), ("trainjob", "pytorch", "CRD kubeflow/trainer@v2.3.0")])
def test_an_undeclared_field_is_an_error_naming_the_field(kind, framework, schema):
    obj = manifests(kind, spec(framework))[0]
    typo = copy.deepcopy(obj)
    _first_container(obj)["imagePullPolicyy"] = "Always"
    _first_container(typo)["imagePullPolicyy"] = "Always"  # a typo: a server would drop it and pull as it likes
    errors = schemas.validate(typo)
    assert errors and all("undeclared field 'imagePullPolicyy'" in error for error in errors), errors
    assert any(schema in error for error in errors), errors
    if kind == "indexed-job":  # checked against both ends of the range
        assert [error.rsplit("(", 1)[1] for error in errors] == ["Kubernetes 1.29)", "Kubernetes 1.37)"]
    obj["spec"]["surprise"] = {"a": 1}
    both = schemas.validate(obj)
    assert any(": spec: undeclared field 'surprise'" in error for error in both), both
    assert any("undeclared field 'imagePullPolicyy'" in error for error in both), both  # every error, not the first
    assert len(both) == 2 * (len(schemas.KUBERNETES_VERSIONS) if kind == "indexed-job" else 1), both


@pytest.mark.parametrize("kind,framework,field", [
    ("mpijob", "horovod", ("spec", "mpiReplicaSpecs", "Worker", "replicas")), ("volcano", "lightgbm", ("spec", "minAvailable")),
    ("indexed-job", "lightgbm", ("spec", "completions")), ("trainjob", "pytorch", ("spec", "trainer", "numNodes"))])
def test_a_field_of_the_wrong_type_is_an_error_naming_the_field(kind, framework, field):
    obj = manifests(kind, spec(framework))[0]
    parent = obj
    for key in field[:-1]:
        parent = parent[key]
    parent[field[-1]] = str(parent[field[-1]])  # "2" where the schema wants an integer
    errors = schemas.validate(obj)
    assert errors and all(f": {'.'.join(field)}: '2' is not of type 'integer'" in error for error in errors), errors


def test_metadata_is_checked_as_objectmeta_on_a_crd_instance_too():
    obj = manifests("mpijob", spec("horovod"))[0]
    obj["metadata"]["label"] = {"a": "b"}  # not "labels"
    assert any(": metadata: undeclared field 'label'" in e for e in schemas.validate(obj))


def test_a_kind_with_no_schema_is_an_error():
    errors = schemas.validate({"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "x"}})
    assert errors and all("no pinned CRD serves it" in error for error in errors)


def test_the_controllers_stand_ins_make_objects_a_server_keeps_whole():
    """The JobSet tests/trainer_controller.py makes of a TrainJob, the runtimes it reads, the Workload
    tests/integration/kubernetes/test_kueue.py creates as Kueue, and the shipped deploy/ manifests."""
    trainjob = manifests("trainjob", spec("pytorch", **FULL))[0]
    trainjob["metadata"]["uid"] = "0"
    for runtime in (AIRFLOW_ML_TORCH, TORCH_DISTRIBUTED):
        assert schemas.validate(runtime) == []
        assert schemas.validate(jobset_for(copy.deepcopy(trainjob), runtime)) == []
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                "metadata": {"name": "mpijob-job-5b2e1", "namespace": "ml", "ownerReferences": [{
                    "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "job", "uid": "0",
                    "controller": True, "blockOwnerDeletion": True}]},
                "spec": {"queueName": "team-a", "priorityClassName": "high-priority", "podSets": [{
                    "name": "worker", "count": 2, "template": {"spec": {"containers": [{"name": "worker", "image": "i"}]}}}]}}
    assert schemas.validate(workload) == []
    for path in sorted((REPO / "deploy" / "kubernetes").glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj:
                assert schemas.validate(obj) == [], path


def test_the_packaged_crds_are_the_pinned_files():
    """The package's copy is what requirements/crds.lock pins (`python scripts/fetch_crds.py --package` writes it),
    each file's bytes by their sha256, every row with its file; where make crds has verified the cache, the same
    bytes as the tests' API server loads."""
    packaged = schemas.PACKAGED_CRDS
    assert (packaged / "crds.lock").read_bytes() == (REPO / "requirements" / "crds.lock").read_bytes()
    pins = schemas._pins(packaged)
    assert len(pins) >= 12 and sorted(p.relative_to(packaged).as_posix() for p in packaged.rglob("*.gz")) == \
        sorted(f"{pin.file}.gz" for pin in pins)
    for pin in pins:
        data = gzip.decompress((packaged / f"{pin.file}.gz").read_bytes())
        assert hashlib.sha256(data).hexdigest() == pin.sha256, pin.file
        cached = REPO / ".tools" / "crds" / pin.file
        if cached.is_file():
            assert cached.read_bytes() == data, pin.file


def test_a_packaged_crd_that_is_not_the_pinned_file_is_refused(tmp_path):
    folder = tmp_path / "crds"
    shutil.copytree(schemas.PACKAGED_CRDS, folder)
    packed = folder / "kubeflow.org_mpijobs.yaml.gz"
    edited = gzip.decompress(packed.read_bytes()).replace(b"format: int32", b"format: int64", 1)
    packed.write_bytes(gzip.compress(edited))
    obj = manifests("mpijob", spec("horovod"))[0]
    with pytest.raises(schemas.SchemaError, match=r"^CRD kubeflow.org_mpijobs.yaml: .* is not the file "
                                                  r"requirements/crds.lock pins"):
        schemas.validate(obj, crds=folder)


def test_the_crd_schema_is_read_as_a_server_prunes_it():
    """The structural-schema extensions as the API server reads them: preserve-unknown-fields keeps a field,
    int-or-string and nullable widen the type, an embedded resource keeps apiVersion/kind/metadata, a
    ``{type: object}`` without properties keeps nothing, and an anyOf branch restating a field closes nothing."""
    import jsonschema

    schema = schemas._closed({"type": "object", "properties": {
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
        "maybe": {"type": "string", "nullable": True},
        "embedded": {"type": "object", "x-kubernetes-embedded-resource": True, "properties": {"spec": {"type": "object"}}},
        "empty": {"type": "object"},
        "either": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                   "anyOf": [{"properties": {"a": {"minLength": 1}}, "required": ["a"]},
                             {"properties": {"b": {"minLength": 1}}, "required": ["b"]}]}}})
    check = jsonschema.Draft202012Validator(schema)
    good = {"free": {"anything": [1]}, "port": "http", "maybe": None, "either": {"a": "x", "b": "y"},
            "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}, "empty": {}}
    assert list(check.iter_errors(good)) == []
    assert list(check.iter_errors({**good, "port": 8080})) == []
    for bad in ({"empty": {"x": 1}}, {"embedded": {"status": {}}}, {"either": {"a": "x", "c": 1}}, {"maybe": 1},
                {"port": 1.5}, {"extra": 1}):
        assert list(check.iter_errors({**good, **bad})), bad
