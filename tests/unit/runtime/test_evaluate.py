"""The evaluation worker and the report: metrics of a real LightGBM model, plot and report files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from airflow_ml_provider.runtime import evaluate
from airflow_ml_provider.runtime.datasets import load_npz_or_csv, write_synthetic
from airflow_ml_provider.runtime.report import METRICS, PLOT, REPORT, plot_training_curve, write_report
from airflow_ml_provider.runtime.splits import file_sha256


def test_evaluation_reports_the_models_held_out_metrics(tmp_path, capsys):
    import lightgbm as lgb  # imported by the test that runs, not by every worker's collection
    from sklearn.metrics import accuracy_score, roc_auc_score

    write_synthetic(tmp_path / "train.npz", tmp_path / "test.npz", rows=2000, features=8, seed=3)
    X, y = load_npz_or_csv(tmp_path / "train.npz")
    booster = lgb.train({"objective": "binary", "verbosity": -1, "num_threads": 1}, lgb.Dataset(X, y), 20)
    booster.save_model(tmp_path / "model.txt")
    assert (
        evaluate.main(["--model", str(tmp_path / "model.txt"), "--test-data", str(tmp_path / "test.npz")])
        == 0
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    X_test, y_test = load_npz_or_csv(tmp_path / "test.npz")
    p = booster.predict(X_test)
    assert result["accuracy"] == round(accuracy_score(y_test, p > 0.5), 6)
    assert result["auc"] == round(roc_auc_score(y_test, p), 6)
    assert result["log_loss"] > 0 and 0 < result["f1"] <= 1
    assert (result["rows"], result["n_features"], result["n_classes"]) == (400, 8, 2)
    assert result["model_sha256"] == file_sha256(tmp_path / "model.txt")
    assert np.sum(result["confusion_matrix"]) == 400


def test_an_unknown_model_format_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "model.onnx").write_text("x")
    write_synthetic(tmp_path / "test.npz", rows=50, features=4)
    assert (
        evaluate.main(["--model", str(tmp_path / "model.onnx"), "--test-data", str(tmp_path / "test.npz")]) == 2
    )
    assert "unknown model format" in capsys.readouterr().err


def test_report_and_training_curve_are_written(tmp_path):
    history = [{"step": s, "loss": 1 / s, "auc": 0.5 + s / 40} for s in range(1, 11)]
    plot = plot_training_curve(history, tmp_path / PLOT, "training")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    files = write_report(
        tmp_path,
        {"accuracy": 0.91, "rows": 10, "confusion_matrix": [[4, 1], [0, 5]]},
        {"loss": 0.1},
        {"dag_id": "d", "training_job": "aml-train-x"},
    )
    assert [f.name for f in files] == [METRICS, REPORT]
    assert json.loads((tmp_path / METRICS).read_text())["held_out"] == {"accuracy": 0.91, "rows": 10}
    report = (tmp_path / REPORT).read_text()
    assert "| accuracy | 0.91 |" in report and "aml-train-x" in report


def test_the_confusion_matrix_is_a_markdown_table_with_a_header_row(tmp_path):
    """Issue 25 D9: without a header row MLflow rendered the matrix as one line of text."""
    import markdown_it

    write_report(tmp_path, {"confusion_matrix": [[4, 1], [0, 5]]}, {}, {})
    report = (tmp_path / REPORT).read_text()
    section = report.split("## Confusion matrix", 1)[1].split("##", 1)[0]
    html = markdown_it.MarkdownIt("commonmark").enable("table").render(section)
    assert html.count("<tr>") == 3 and html.count("</th>") == 3, html  # header + two true classes
    assert "<td><strong>1</strong></td>\n<td" in html and "<td style=\"text-align:right\">5</td>" in html


def test_a_curve_over_epochs_ticks_whole_epochs():
    """Issue 45 D10: a Horovod run's 3 epochs were ticked 1.00, 1.25, 1.50, ... on the x axis."""
    import matplotlib.pyplot as plt

    from airflow_ml_provider.runtime.report import training_curve_figure

    figure = training_curve_figure([{"step": step, "loss": 1 / step, "accuracy": 0.5 + step / 10} for step in (1, 2, 3)],
                                   "training")
    figure.canvas.draw()
    for axis in figure.axes:
        shown = [tick for tick in axis.get_xticks() if axis.get_xlim()[0] <= tick <= axis.get_xlim()[1]]
        assert shown and all(float(tick).is_integer() for tick in shown), shown
    plt.close(figure)


def test_a_model_npz_that_is_not_a_softmax_layer_is_refused_and_nothing_in_it_runs(tmp_path):
    from airflow_ml_provider.runtime.predict import load_predictor

    np.savez(tmp_path / "model.npz", weights=np.ones((4, 3)), bias=np.ones(2))
    with pytest.raises(ValueError, match=r"weights \(4, 3\) and bias \(2,\) are not a softmax layer's"):
        load_predictor(tmp_path / "model.npz")
    np.savez(tmp_path / "model.npz", weights=np.array([object()], dtype=object), bias=np.ones(2))
    with pytest.raises(ValueError, match="allow_pickle=False"):  # numpy's refusal: an object array is a pickle
        load_predictor(tmp_path / "model.npz")
