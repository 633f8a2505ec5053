"""Trial specs: placeholders replaced by plain data, and templates that do not fit the space rejected."""

from __future__ import annotations

import json

import pytest

from airflow_ml_provider.jobs.spec import SpecError, TrainingJobSpec
from airflow_ml_provider.search.space import SearchSpaceError, parse_space
from airflow_ml_provider.search.template import check_template, render_trial


def _spec(*command: str, env: dict[str, str] | None = None) -> TrainingJobSpec:
    return TrainingJobSpec(framework="lightgbm", num_workers=2, command=["python", *command], env=env or {})


def test_values_go_into_json_arguments_typed_and_into_other_arguments_as_text():
    params_json = json.dumps({"num_leaves": "{{ params.num_leaves }}", "learning_rate": "{{params.lr}}",
                              "note": "lr={{ params.lr }}", "bagging": "{{ params.bagging }}", "seed": 0})
    spec = _spec("train.py", "--params-json", params_json, "--rounds={{ params.rounds }}", "{{ params.name }}",
                 env={"BOOSTING": "{{ params.name }}"})
    trial = render_trial(spec, {"num_leaves": 31, "lr": 0.05, "bagging": True, "rounds": 20, "name": "dart"})

    assert json.loads(trial.command[3]) == {"num_leaves": 31, "learning_rate": 0.05, "note": "lr=0.05",
                                            "bagging": True, "seed": 0}
    assert trial.command[4:] == ["--rounds=20", "dart"]
    assert trial.env == {"BOOSTING": "dart"}
    assert (trial.num_workers, trial.framework) == (spec.num_workers, spec.framework)


def test_a_value_is_data_never_a_template_or_shell_text():
    spec = _spec("-c", "print('{{ params.a }}')", "--b={{ params.b }}")
    trial = render_trial(spec, {"a": "{{ params.b }}; rm -rf /", "b": "$(whoami)"})
    assert trial.command == ["python", "-c", "print('{{ params.b }}; rm -rf /')", "--b=$(whoami)"]


def test_the_rendered_trial_is_validated_as_a_spec():
    spec = TrainingJobSpec(framework="generic", num_workers=1, command=["python"], env={"X": "{{ params.x }}"})
    assert render_trial(spec, {"x": 3}).env == {"X": "3"}
    with pytest.raises(SpecError):
        render_trial(spec.model_copy(update={"num_workers": 0}), {"x": 3})


def test_every_parameter_must_be_used_and_every_placeholder_declared():
    space = parse_space({"lr": {"type": "float", "low": 0.01, "high": 0.3}, "leaves": [8, 16]})
    check_template(_spec("--lr", "{{ params.lr }}", env={"LEAVES": "{{ params.leaves }}"}), space)
    with pytest.raises(SearchSpaceError, match=r"search_space.leaves: the trial never uses it"):
        check_template(_spec("--lr", "{{ params.lr }}"), space)
    with pytest.raises(SearchSpaceError, match=r"trial: placeholder \{\{ params.lerning_rate \}\} names no parameter"):
        check_template(_spec("{{ params.lr }}", "{{ params.leaves }}", "{{ params.lerning_rate }}"), space)
