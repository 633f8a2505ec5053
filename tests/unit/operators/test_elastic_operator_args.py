"""HorovodTrainingOperator's elastic arguments reach the spec, and the bundled trainer fits the job."""

from __future__ import annotations

from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.operators.base_job import spec_on
from airflow_ml_provider.operators.training import HorovodTrainingOperator


def test_min_and_max_workers_make_an_elastic_spec_running_the_elastic_trainer(tmp_path):
    operator = HorovodTrainingOperator(task_id="train", num_workers=2, min_workers=1, max_workers=4)
    spec = spec_on(operator, LocalBackend(tmp_path), "job")
    assert spec.elastic and (spec.min_workers, spec.max_workers) == (1, 4)
    assert spec.command == ["python", "-m", "airflow_ml_provider.runtime.horovod_elastic"]
    assert operator.follow.max_preemptions == 3


def test_a_fixed_size_job_runs_the_checkpointing_trainer_or_the_given_command(tmp_path):
    fixed = spec_on(HorovodTrainingOperator(task_id="train", num_workers=2), LocalBackend(tmp_path), "job")
    assert not fixed.elastic and fixed.command[-1] == "airflow_ml_provider.runtime.horovod_keras"
    own = spec_on(HorovodTrainingOperator(task_id="train", command=["python", "t.py"]), LocalBackend(tmp_path), "j")
    assert own.command == ["python", "t.py"]
