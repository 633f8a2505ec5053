"""PreprocessOperator's two forms, refused when the DAG file is parsed if mixed or incomplete: every part as one
sharded job (``inputs`` + ``output_dir``) or one part (``input_path`` + ``output_path``)."""

from __future__ import annotations

import pytest

from airflow_ml_provider.operators.preprocess import PreprocessOperator


@pytest.mark.parametrize("kwargs", [
    {},
    {"inputs": ["/d/raw/a.npz"]},
    {"output_dir": "/d/processed"},
    {"input_path": "/d/raw/a.npz"},
    {"inputs": ["/d/raw/a.npz"], "output_dir": "/d/processed", "input_path": "/d/raw/a.npz",
     "output_path": "/d/a.npz"},
])
def test_a_mixed_or_incomplete_form_is_refused_naming_both(kwargs):
    with pytest.raises(ValueError, match="give inputs and output_dir .* or input_path and output_path"):
        PreprocessOperator(task_id="p", **kwargs)


def test_every_part_is_one_sharded_jobs_plan_a_shard_per_part_committed_under_output_dir():
    task = PreprocessOperator(task_id="p", inputs=["/d/raw/train-00000.npz", "/d/raw/test.npz"],
                              output_dir="/d/processed", workers="3", sharding={"max_attempts": 5})
    request = task.job_request()
    assert request.command == ["python", "-m", "airflow_ml_provider.runtime.preprocess", "--shards"]
    assert (request.num_workers, request.output_dirs) == (3, ["/d/processed"])
    assert request.shards == {"count": 2, "inputs": [["/d/raw/train-00000.npz"], ["/d/raw/test.npz"]],
                              "in_process": True, "max_attempts": 5, "output": "/d/processed"}


def test_an_unknown_sharding_option_is_refused_when_parsed():
    with pytest.raises(ValueError, match=r"sharding: unknown option\(s\) \['files_per_shard'\]"):
        PreprocessOperator(task_id="p", inputs=[], output_dir="/d", sharding={"files_per_shard": 2})
