"""Spot pools: node selectors and tolerations are checked as Kubernetes checks them, bounded, refused naming the
field, and rendered into every pod template of every backend; recipes set them per experiment."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.spec import KubernetesOptions, SpecError, TrainingJobSpec
from airflow_ml_provider.recipes import parse_recipe
from airflow_ml_provider.recipes.dag import build_dag
from airflow_ml_provider.recipes.search import trial_spec

BASE = {"framework": "generic", "command": ["python", "t.py"], "num_workers": 1}


def test_a_spot_pool_s_selector_and_toleration_are_accepted():
    spot = {"node_selector": {"cloud.google.com/gke-spot": "true", "pool": "a100_spot"},
            "tolerations": [{"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true",
                             "effect": "NoSchedule"}, {"key": "spot", "operator": "Exists"}]}
    spec = TrainingJobSpec(**BASE, kubernetes=spot)
    assert spec.kubernetes.node_selector["cloud.google.com/gke-spot"] == "true"


@pytest.mark.parametrize("options,field", [
    ({"node_selector": {"pool": "spot pool"}}, "kubernetes.node_selector.pool"),
    ({"node_selector": {"pool": "x" * 64}}, "kubernetes.node_selector.pool"),
    ({"node_selector": {"Bad_Prefix/pool": "spot"}}, "kubernetes.node_selector.Bad_Prefix/pool"),
    ({"node_selector": {"pool\n": "spot"}}, "kubernetes.node_selector.pool\n"),
    ({"tolerations": [{"key": "spot; rm", "operator": "Exists"}]}, "kubernetes.tolerations.0.key"),
    ({"tolerations": [{"key": "spot", "value": "-true"}]}, "kubernetes.tolerations.0.value"),
])
def test_a_value_kubernetes_would_refuse_is_refused_naming_the_field(options, field):
    with pytest.raises(SpecError, match=f"TrainingJobSpec.{field}"):
        TrainingJobSpec(**BASE, kubernetes=options)


@pytest.mark.parametrize("options,field,message", [
    ({"tolerations": [{"operator": "Equal", "value": "x"}]}, "kubernetes.tolerations.0", "without a key must use 'Exists'"),
    ({"tolerations": [{"key": "spot", "operator": "Exists", "value": "x"}]}, "kubernetes.tolerations.0",
     "'Exists' takes no value"),
    ({"tolerations": [{"key": "spot", "operator": "Gt"}]}, "kubernetes.tolerations.0.operator", "'Exists' or 'Equal'"),
    ({"tolerations": [{"key": "spot", "effect": "Evict"}]}, "kubernetes.tolerations.0.effect", "'NoSchedule'"),
    ({"tolerations": [{"key": "spot", "effect": "NoSchedule", "toleration_seconds": 60}]}, "kubernetes.tolerations.0",
     "only for effect 'NoExecute'"),
    ({"tolerations": [{"key": "spot", "effect": "NoExecute", "toleration_seconds": -1}]},
     "kubernetes.tolerations.0.toleration_seconds", "greater than or equal to 0"),
    ({"tolerations": [{"key": "k", "operator": "Exists"}] * 33}, "kubernetes.tolerations", "at most 32 items"),
    ({"node_selector": {f"k{i}": "v" for i in range(33)}}, "kubernetes.node_selector", "at most 32 items"),
])
def test_tolerations_are_checked_as_kubernetes_checks_them_and_bounded(options, field, message):
    with pytest.raises(SpecError, match=f"TrainingJobSpec.{field}: .*{message}"):
        TrainingJobSpec(**BASE, kubernetes=options)


def _pod_specs(obj):
    """Every pod spec in a rendered manifest (a dict with containers)."""
    if isinstance(obj, list):
        return [spec for item in obj for spec in _pod_specs(item)]
    if not isinstance(obj, dict):
        return []
    return ([obj] if "containers" in obj else []) + [spec for value in obj.values() for spec in _pod_specs(value)]


@pytest.mark.parametrize("kind,framework", [("mpijob", "horovod"), ("volcano", "horovod"), ("volcano", "lightgbm"),
                                            ("indexed-job", "lightgbm")])
def test_every_backend_renders_the_spot_pool_into_each_pod_template(kind, framework):
    spot = {"node_selector": {"cloud.google.com/gke-spot": "true"},
            "tolerations": [{"key": "cloud.google.com/gke-spot", "operator": "Exists", "effect": "NoSchedule"},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                             "toleration_seconds": 60}]}
    spec = TrainingJobSpec(framework=framework, command=["python", "t.py"], num_workers=2, image="img:1", kubernetes=spot)
    manifests = list(yaml.safe_load_all(get_backend(kind, api_client=None).render("spot-job", spec, {})))
    pods = _pod_specs(manifests)
    assert pods
    for pod in pods:
        assert pod["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
        assert pod["tolerations"] == [
            {"key": "cloud.google.com/gke-spot", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}]


def test_a_recipe_experiment_s_spot_pool_reaches_its_trials_and_its_search(tmp_path):
    recipe = parse_recipe(textwrap.dedent("""\
        version: 1
        name: spot
        experiments:
          train:
            framework: generic
            command: [python, t.py]
            kubernetes:
              node_selector: {cloud.google.com/gke-spot: "true"}
              tolerations: [{key: cloud.google.com/gke-spot, operator: Exists, effect: NoSchedule}]
    """))
    dag = build_dag(recipe)
    options = KubernetesOptions(**dag.task_dict["train"].partial_kwargs["job"]["kubernetes"])
    assert options == recipe.experiments["train"].kubernetes.options()
    assert options.node_selector == {"cloud.google.com/gke-spot": "true"}
    assert trial_spec("train", recipe.experiments["train"]).kubernetes == options
