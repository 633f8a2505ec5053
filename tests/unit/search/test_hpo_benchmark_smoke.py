"""Smoke test of benchmarks/hpo_scaling.py's sampler comparison (the comparison itself is only printed)."""

from __future__ import annotations

import importlib.util

from support import REPO


def test_the_sampler_race_runs_and_reports_best_so_far_curves(capsys):
    spec = importlib.util.spec_from_file_location("hpo_scaling", REPO / "benchmarks" / "hpo_scaling.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    race = bench.sampler_race(["tpe", "random"], seeds=1, budget=4, rows=600, rounds=5)
    bench.report_race(race, budget=4)

    for curves in race["curves"].values():
        (curve,) = curves
        assert len(curve) == 4 and curve == sorted(curve)  # best so far never decreases
    assert 0.5 < race["target"] <= 1.0
    assert bench.trials_to_target([0.6, 0.7, 0.9], 0.7) == 2 and bench.trials_to_target([0.6], 0.7) is None
    assert "TPE ended better than or equal to random at 4 trials" in capsys.readouterr().out


def _search_scale():
    spec = importlib.util.spec_from_file_location("search_scale", REPO / "benchmarks" / "search_scale.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_search_scale_benchmark_runs_every_trial_through_the_real_loop():
    bench = _search_scale()
    for sampler in ("random", "grid", "tpe"):
        result = bench.orchestration(sampler, trials=24, parallel=8)
        assert (result["trials"], result["complete"]) == (24, 24), result
        assert result["wall_s"] > 0 and result["cpu_s"] > 0 and result["peak_rss_mb"] > 0
