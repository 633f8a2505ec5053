"""The trials plot renders completed and pruned trials, with or without importances."""

from __future__ import annotations

import optuna

from airflow_ml_provider.search.plot import plot_trials


def test_the_plot_is_a_png_with_completed_and_pruned_trials(tmp_path):
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(8):
        trial = study.ask()
        x, leaves = trial.suggest_float("x", 0, 1), trial.suggest_int("leaves", 2, 8)
        trial.report(x / 2, 1)
        if x < 0.3:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, x + leaves / 100)
    path = plot_trials(study, tmp_path / "trials.png", "auc")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_search_without_two_completed_trials_still_gets_a_plot(tmp_path):
    study = optuna.create_study(direction="minimize")
    trial = study.ask()
    study.tell(trial, trial.suggest_float("x", 0, 1))
    assert plot_trials(study, tmp_path / "trials.png", "loss").stat().st_size > 0
