"""A recipe experiment with a ``search:`` section becomes one HyperparameterSearchOperator task."""

from __future__ import annotations

import json
import textwrap

import pytest

from airflow_ml_provider.hooks.artifact_store import JobEnvironment
from airflow_ml_provider.hooks.training_backend import JobSetup
from airflow_ml_provider.jobs.backends.local.backend import LocalBackend
from airflow_ml_provider.jobs.spec import TrainingJobSpec
from airflow_ml_provider.operators.search import HyperparameterSearchOperator, trial_spec_builder
from airflow_ml_provider.recipes import RecipeError, parse_recipe
from airflow_ml_provider.recipes.dag import build_dag
from airflow_ml_provider.search.space import SearchSettings, parse_space
from airflow_ml_provider.search.template import check_template, render_trial

RECIPE = textwrap.dedent("""\
    version: 1
    name: unit_recipe_search
    seed: 4
    backend: local
    experiments:
      data:
        framework: generic
        command: [python, prep.py]
      tune:
        depends_on: [data]
        framework: lightgbm
        workers: 2
        samples: 12
        parallel: 3
        search: {sampler: tpe, objective: loss, direction: minimize}
        parameters:
          data_dir: /data
          num_leaves: [15, 31, 63]
          learning_rate: {min: 0.02, max: 0.3, scale: log}
          rounds: {min: 30, max: 80}
          note: ["{{ 7 * 7 }}", "$(id)"]
        command: [python, -m, airflow_ml_provider.runtime.lightgbm_trainer, --train-data, "{{data_dir}}/train.npz",
                  --num-boost-round, "{{rounds}}", --note, "{{note}}", --out, "{{experiment}}",
                  --params-json, '{"num_leaves": {{num_leaves}}, "learning_rate": {{learning_rate}}}']
""")


def test_a_search_experiment_becomes_one_search_task(tmp_path):
    dag = build_dag(parse_recipe(RECIPE))
    tune = dag.task_dict["tune"]
    assert isinstance(tune, HyperparameterSearchOperator) and tune.upstream_task_ids == {"data"}
    settings = SearchSettings(**tune.search)
    assert (settings.sampler, settings.n_trials, settings.max_parallel, settings.seed) == ("tpe", 12, 3, 4)
    assert (settings.objective_metric, settings.direction, tune.backend) == ("loss", "minimize", "local")
    assert tune.search_space == {
        "num_leaves": [15, 31, 63],
        "learning_rate": {"type": "float", "low": 0.02, "high": 0.3, "log": True},
        "rounds": {"type": "int", "low": 30, "high": 80, "log": False},
        "note": ["{{ 7 * 7 }}", "$(id)"],
    }
    assert isinstance(tune.trial, TrainingJobSpec) and tune.trial.num_workers == 2

    # what each trial's job runs: constants filled in, searched values substituted as data
    backend = LocalBackend(tmp_path)  # no artifact root configured: the backend's own per-job dirs
    setup = JobSetup("ml_training_default", backend, None, backend.default_artifact_dir, JobEnvironment())
    template = trial_spec_builder(tune.trial, setup)("aml-tune-trial-0")
    check_template(template, parse_space(tune.search_space))
    spec = render_trial(template, {"num_leaves": 31, "learning_rate": 0.05, "rounds": 40, "note": "{{ 7 * 7 }}"})
    assert spec.command[3:] == ["--train-data", "/data/train.npz", "--num-boost-round", "40", "--note", "{{ 7 * 7 }}",
                                "--out", "tune", "--params-json", spec.command[-1]]
    assert json.loads(spec.command[-1]) == {"num_leaves": 31, "learning_rate": 0.05}
    assert spec.model_dir == str(tmp_path / "artifacts" / "aml-tune-trial-0" / "model")


def test_a_search_without_a_budget_or_numbering_trials_itself_is_rejected():
    without_budget = RECIPE.replace("    samples: 12\n", "")
    with pytest.raises(RecipeError, match=r"experiments\.tune: samples: a tpe search needs a trial budget"):
        parse_recipe(without_budget)
    numbered = RECIPE.replace('--out, "{{experiment}}"', '--out, "{{sample}}"')
    with pytest.raises(RecipeError, match=r"command: \{\{sample\}\} is not known before a search runs"):
        parse_recipe(numbered)
