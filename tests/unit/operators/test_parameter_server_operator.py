"""ParameterServerTrainingOperator's job: its roles from num_ps/num_workers/min_workers and a role's own settings,
the bundled trainer's arguments as argv data, a bad role naming its field, the same job rendered for volcano."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_ml_provider.jobs.backends import get_backend
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.operators.base_job import spec_on
from airflow_ml_provider.operators.parameter_server import ParameterServerTrainingOperator


def test_the_operator_asks_for_a_chief_num_ps_and_num_workers_with_each_roles_own_settings(tmp_path):
    operator = ParameterServerTrainingOperator(
        task_id="ps", num_ps=2, num_workers=4, min_workers=2, steps=500, train_data="/d/x; rm -rf /.npz",
        roles={"ps": {"resources": {"memory": "16Gi"}, "priority_class": "high", "count": 9}})
    spec = spec_on(operator, LocalBackend(tmp_path), "job")
    assert spec.framework.value == "tensorflow-ps" and spec.num_workers == 7
    assert {name: (role.count, role.min_count) for name, role in spec.roles.items()} == {
        "chief": (1, None), "ps": (2, None), "worker": (4, 2)}  # the operator's counts win over a role's
    assert spec.roles["ps"].resources.memory == "16Gi" and spec.roles["ps"].priority_class == "high"
    assert spec.command == ["python", "-m", "airflow_ml_provider.runtime.tf_ps_trainer", "--steps", "500",
                            "--train-data", "/d/x; rm -rf /.npz"]
    assert {"num_ps", "steps", "train_data", "test_data"} <= set(operator.template_fields)
    [job] = get_backend("volcano", api_client=None, namespace="ml").manifests("job", spec.model_copy(
        update={"image": "registry.example/train:1"}), {})
    assert [task["name"] for task in job["spec"]["tasks"]] == ["chief", "ps", "worker"]


def test_a_bad_role_fails_the_task_without_retry_naming_the_field(tmp_path):
    operator = ParameterServerTrainingOperator(task_id="ps", roles={"ps": {"min_count": 1}})
    with pytest.raises(AirflowFailException, match="ps: TrainingJobSpec.spec: roles.ps.min_count: parameter servers "
                                                   "are never elastic"):
        spec_on(operator, LocalBackend(tmp_path), "job")
