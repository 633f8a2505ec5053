"""Search spaces and settings: what is accepted, and errors that name the offending field."""

from __future__ import annotations

import optuna
import pytest

from airflow_ml_provider.search.space import (
    SearchSpaceError,
    make_pruner,
    make_sampler,
    parse_settings,
    parse_space,
    trial_budget,
)


@pytest.mark.parametrize(
    ("space", "named"),
    [
        ({"lr": {"type": "float", "low": 0.3, "high": 0.1}}, "search_space.lr: low (0.3) must be below high"),
        ({"lr": {"type": "float", "low": 0.0, "high": 1.0, "log": True}}, "search_space.lr: a log scale needs low > 0"),
        ({"lr": {"type": "float", "low": 0.1, "high": 1.0, "log": True, "step": 0.1}},
         "search_space.lr: log and step cannot be combined"),
        ({"leaves": {"type": "int", "low": 2, "high": "many"}}, "search_space.leaves.high:"),
        ({"leaves": {"type": "int", "low": 2, "high": 8, "stepp": 2}}, "search_space.leaves.stepp: Extra inputs"),
        ({"leaves": {"type": "integer", "low": 2, "high": 8}}, "search_space.leaves: Input tag 'integer'"),
        ({"boosting": []}, "search_space.boosting.choices: List should have at least 1 item"),
        ({"boosting": ["gbdt", "gbdt"]}, "search_space.boosting.choices: must be distinct"),
        ({"boosting": [{"nested": 1}]}, "search_space.boosting.choices.0"),
        ({"bad-name": [1, 2]}, "search_space: 'bad-name' is not a valid parameter name"),
        ({}, "search_space: declares no parameters"),
    ],
)
def test_invalid_spaces_are_rejected_naming_the_field(space, named):
    with pytest.raises(SearchSpaceError) as error:
        parse_space(space)
    assert named in str(error.value)


def test_a_list_is_shorthand_for_a_categorical_parameter_and_grids_enumerate_every_value():
    space = parse_space({
        "boosting": ["gbdt", "dart"],
        "leaves": {"type": "int", "low": 4, "high": 16, "step": 4},
        "rate": {"type": "float", "low": 0.1, "high": 0.3, "step": 0.1},
    })
    assert space.grid() == {"boosting": ["gbdt", "dart"], "leaves": [4, 8, 12, 16], "rate": [0.1, 0.2, 0.3]}
    assert trial_budget(parse_settings(sampler="grid"), space) == 24
    assert trial_budget(parse_settings(sampler="grid", n_trials=5), space) == 5
    with pytest.raises(SearchSpaceError, match="n_trials: 25 exceeds the grid's 24 combinations"):
        trial_budget(parse_settings(sampler="grid", n_trials=25), space)


def test_the_grid_sampler_needs_finite_values():
    space = parse_space({"rate": {"type": "float", "low": 0.1, "high": 0.3}})
    with pytest.raises(SearchSpaceError, match="search_space.rate: the grid sampler needs finite values"):
        make_sampler(parse_settings(sampler="grid"), space, 0)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"sampler": "tpe"}, "search.n_trials: required for the tpe sampler"),
        ({"sampler": "bayes", "n_trials": 4}, "search.sampler: Input should be 'tpe', 'random', 'grid' or 'cmaes'"),
        ({"n_trials": 0}, "search.n_trials: Input should be greater than or equal to 1"),
        ({"n_trials": 4, "max_parallel": 0}, "search.max_parallel:"),
        ({"n_trials": 4, "direction": "up"}, "search.direction:"),
        ({"n_trials": 4, "metric_patterns": ["auc=([0-9.]+)"]}, "search.metric_patterns: metrics[0]: "),
        ({"n_trials": 4, "metric_patterns": ["x", "auc=("]}, "search.metric_patterns: metrics[1]: invalid regular"),
        ({"n_trials": 4, "metric_patterns": ["loss=(?P<loss>[0-9.]+)"]},
         "search.metric_patterns: no pattern has a group named after the objective, e.g. (?P<auc>"),
    ],
)
def test_invalid_settings_are_rejected_naming_the_setting(settings, named):
    with pytest.raises(SearchSpaceError) as error:
        parse_settings(**settings)
    assert named in str(error.value)


def test_samplers_and_pruners_come_from_optuna():
    space = parse_space({"leaves": {"type": "int", "low": 2, "high": 8}})
    assert isinstance(make_sampler(parse_settings(sampler="tpe", n_trials=8), space, 0), optuna.samplers.TPESampler)
    assert isinstance(make_sampler(parse_settings(sampler="random", n_trials=8), space, 0),
                      optuna.samplers.RandomSampler)
    assert isinstance(make_sampler(parse_settings(sampler="grid"), space, 0), optuna.samplers.GridSampler)
    assert isinstance(make_pruner(parse_settings(n_trials=8)), optuna.pruners.MedianPruner)
    assert isinstance(make_pruner(parse_settings(n_trials=8, pruner="none")), optuna.pruners.NopPruner)
    assert isinstance(make_sampler(parse_settings(sampler="cmaes", n_trials=8), space, 0), optuna.samplers.CmaEsSampler)
    hyperband = make_pruner(parse_settings(n_trials=8, pruner="hyperband", pruning_warmup_steps=3))
    assert isinstance(hyperband, optuna.pruners.HyperbandPruner) and hyperband._min_resource == 3
    halving = make_pruner(parse_settings(n_trials=8, pruner="successive_halving"))
    assert isinstance(halving, optuna.pruners.SuccessiveHalvingPruner) and halving._min_resource == 1


def test_cmaes_searches_numeric_parameters_and_draws_categorical_ones():
    space = parse_space({"x": {"type": "float", "low": -3.0, "high": 3.0}, "n": {"type": "int", "low": 0, "high": 9},
                         "kind": ["a", "b"]})
    settings = parse_settings(sampler="cmaes", n_trials=30, seed=1, direction="minimize")
    study = optuna.create_study(sampler=make_sampler(settings, space, 0), direction="minimize")
    for _ in range(30):
        trial = study.ask()
        values = space.suggest(trial)
        study.tell(trial, (values["x"] - 1) ** 2 + (values["n"] - 4) ** 2 + (values["kind"] == "b"))
    assert study.best_value < 2.0
    assert {t.params["kind"] for t in study.trials} == {"a", "b"}


def test_a_resumed_random_search_does_not_replay_the_parameters_it_already_proposed():
    space = parse_space({"x": {"type": "float", "low": 0.0, "high": 1.0}})
    settings = parse_settings(sampler="random", n_trials=8, seed=7)

    def first_values(trials_so_far: int) -> list[float]:
        study = optuna.create_study(sampler=make_sampler(settings, space, trials_so_far))
        return [space.suggest(study.ask())["x"] for _ in range(3)]

    assert first_values(0) == first_values(0), "a seeded search is reproducible"
    assert first_values(3) != first_values(0)


def test_the_grid_sampler_works_with_ask_and_tell_to_the_last_point():
    space = parse_space({"leaves": [2, 4, 8]})
    study = optuna.create_study(sampler=make_sampler(parse_settings(sampler="grid", seed=0), space, 0))
    seen = []
    for _ in range(3):
        trial = study.ask()
        seen.append(space.suggest(trial)["leaves"])
        study.tell(trial, 1.0)  # optuna's own GridSampler raises here on the last point (optuna#5141)
    assert sorted(seen) == [2, 4, 8]
