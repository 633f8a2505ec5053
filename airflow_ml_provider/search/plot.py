"""The trials plot: objective against trial number (best so far drawn through it) and parameter importances."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState


def plot_trials(study: optuna.Study, path: Path, metric: str) -> Path:
    """Write the plot as a PNG and return its path."""
    from matplotlib.figure import Figure  # the object API renders with Agg, touching no global backend

    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state is TrialState.COMPLETE]
    pruned = [t for t in trials if t.state is TrialState.PRUNED and t.intermediate_values]
    figure = Figure(figsize=(11, 4.5), layout="constrained")
    history, importance = figure.subplots(1, 2, width_ratios=(3, 2))

    history.scatter([t.number for t in complete], [t.value for t in complete], label="completed", zorder=3)
    if pruned:
        last = [t.intermediate_values[max(t.intermediate_values)] for t in pruned]
        history.scatter([t.number for t in pruned], last, marker="x", color="grey", label="pruned (last step)")
    if complete:
        pick = max if study.direction is optuna.study.StudyDirection.MAXIMIZE else min
        best, numbers, values = None, [], []
        for trial in complete:
            best = trial.value if best is None else pick(best, trial.value)
            numbers.append(trial.number)
            values.append(best)
        history.step(numbers, values, where="post", color="tab:red", label="best so far")
    history.set(xlabel="trial", ylabel=metric, title=f"{metric} by trial ({study.direction.name.lower()})")
    history.legend(loc="best")

    importances = _importances(study) if len(complete) >= 2 else {}
    if importances:
        names = list(importances)[::-1]
        importance.barh(names, [importances[name] for name in names])
        importance.set(xlabel="importance (fANOVA)", title="parameter importances")
    else:
        importance.text(0.5, 0.5, "importances need at least two\ncompleted trials that differ",
                        ha="center", va="center")
        importance.set_axis_off()
    figure.savefig(path, dpi=100)
    return path


def _importances(study: optuna.Study) -> dict[str, float]:
    try:
        return optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError):  # too few trials, or every parameter held constant
        return {}
