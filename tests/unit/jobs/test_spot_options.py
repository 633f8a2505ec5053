"""Spot pools: node selectors and tolerations are Kubernetes label keys and values, refused naming the field."""

from __future__ import annotations

import pytest

from airflow_ml_provider.jobs.spec import SpecError, TrainingJobSpec

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
