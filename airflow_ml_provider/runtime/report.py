"""Evaluation artifacts: the training-curve plot and the metrics report (Markdown and JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PLOT = "training_curve.png"
REPORT = "evaluation_report.md"
METRICS = "metrics.json"


def plot_training_curve(history: list[dict[str, Any]], path: str | Path, title: str) -> Path:
    """Loss (left) and every other per-step metric (right) against the step (epoch or round), saved to ``path``."""
    import matplotlib.pyplot as plt

    figure = training_curve_figure(history, title)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return Path(path)


def training_curve_figure(history: list[dict[str, Any]], title: str):
    """The plot's figure; whole-numbered steps (epochs, rounds) get whole-numbered ticks, not 1.00, 1.25, ..."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a worker
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps = [row.get("step", i + 1) for i, row in enumerate(history)]
    others = sorted({key for row in history for key in row} - {"step", "loss"})
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(steps, [row.get("loss") for row in history], marker=".", label="loss")
    left.set(title="loss", xlabel="step")
    for name in others:
        right.plot(steps, [row.get(name) for row in history], marker=".", label=name)
    right.set(title="metrics", xlabel="step")
    whole = all(float(step).is_integer() for step in steps)
    for axis in (left, right):
        axis.grid(alpha=0.3)
        if whole:
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        if axis.lines:
            axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def write_report(out_dir: str | Path, evaluation: dict[str, Any], training: dict[str, Any],
                 lineage: dict[str, str]) -> list[Path]:
    """Write ``metrics.json`` and ``evaluation_report.md``; return their paths."""
    out_dir = Path(out_dir)
    metrics = {k: v for k, v in evaluation.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    (out_dir / METRICS).write_text(json.dumps({"held_out": metrics, "training_final": training,
                                               "lineage": lineage}, indent=2, sort_keys=True))
    lines = [f"# Evaluation of {lineage.get('training_job', 'the trained model')}", "",
             "## Held-out metrics", "", "| metric | value |", "|---|---|"]
    lines += [f"| {name} | {value:.6g} |" for name, value in sorted(metrics.items())]
    lines += ["", "## Final training metrics", "", "| metric | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in sorted(training.items())]
    if matrix := evaluation.get("confusion_matrix"):
        lines += ["", "## Confusion matrix", "", *_confusion_table(matrix)]
    lines += ["", "## Lineage", ""] + [f"- {key}: `{value}`" for key, value in sorted(lineage.items())]
    (out_dir / REPORT).write_text("\n".join(lines) + "\n")
    return [out_dir / METRICS, out_dir / REPORT]


def _confusion_table(matrix: list[list[int]]) -> list[str]:
    """A Markdown table with a header row (a table without one renders as a single line of text):
    one row per true class, one column per predicted class."""
    classes = range(len(matrix))
    return ["| true \\ predicted | " + " | ".join(f"{c}" for c in classes) + " |",
            "|---|" + "---:|" * len(matrix),
            *(f"| **{c}** | " + " | ".join(str(cell) for cell in row) + " |" for c, row in zip(classes, matrix))]
