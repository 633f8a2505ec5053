"""Parameter-space sampling: counts, minimal repetition of discrete combinations, range bounds."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from airflow_ml_provider.recipes.experiment_space import Range, product_size, sample_space

DISCRETE = {"optimizer": ["sgd", "adam", "rmsprop"], "batch_size": [16, 32]}


def _combination_counts(trials: list[dict]) -> Counter:
    return Counter((t["optimizer"], t["batch_size"]) for t in trials)


@pytest.mark.parametrize("n", [1, 4, 6, 7, 13, 100])
def test_n_samples_repeat_each_combination_as_little_as_possible(n):
    trials = sample_space(DISCRETE, {}, n, seed=3)
    counts = _combination_counts(trials)
    assert len(trials) == n
    size = product_size(DISCRETE)
    assert size == 6
    full = [(o, b) for o in DISCRETE["optimizer"] for b in DISCRETE["batch_size"]]
    per_combination = [counts.get(c, 0) for c in full]
    assert max(per_combination) - min(per_combination) <= 1, counts
    assert max(per_combination) == math.ceil(n / size)
    if n <= size:
        assert len(counts) == n, "fewer samples than combinations: every sample is a different combination"


def test_each_range_gives_n_samples_within_bounds_matched_one_to_one():
    ranges = {
        "lr": Range(1e-4, 1e-1, scale="log"),
        "dropout": Range(0.0, 0.5),
        "layers": Range(1, 4, integer=True),
    }
    trials = sample_space(DISCRETE, ranges, 50, seed=1)
    assert len(trials) == 50
    assert all(set(t) == {"optimizer", "batch_size", "lr", "dropout", "layers"} for t in trials)
    assert all(1e-4 <= t["lr"] <= 1e-1 and 0.0 <= t["dropout"] <= 0.5 for t in trials)
    assert all(isinstance(t["layers"], int) and 1 <= t["layers"] <= 4 for t in trials)
    assert len({t["lr"] for t in trials}) == 50, "random samples of a continuous range do not repeat"
    assert {t["layers"] for t in trials} == {1, 2, 3, 4}


def test_log_scale_samples_spread_over_orders_of_magnitude():
    values = [t["lr"] for t in sample_space({}, {"lr": Range(1e-5, 1e-1, scale="log")}, 400, seed=0)]
    decades = Counter(math.floor(math.log10(v)) for v in values)
    assert set(decades) == {-5, -4, -3, -2}
    assert min(decades.values()) > 50, f"a log-uniform draw fills each decade about equally: {decades}"


def test_grid_sampling_includes_both_ends_evenly_spaced():
    values = sorted(t["x"] for t in sample_space({}, {"x": Range(0.0, 1.0, sampling="grid")}, 5, seed=0))
    assert values == [0.0, 0.25, 0.5, 0.75, 1.0]
    log_grid = sorted(t["x"] for t in sample_space({}, {"x": Range(1e-3, 1e-1, "log", "grid")}, 3, seed=0))
    assert log_grid == [0.001, 0.01, 0.1]


def test_sampling_is_deterministic_for_a_seed_and_differs_across_seeds():
    ranges = {"lr": Range(0.01, 0.1)}
    assert sample_space(DISCRETE, ranges, 10, seed="7/train") == sample_space(
        DISCRETE, ranges, 10, seed="7/train"
    )
    assert sample_space(DISCRETE, ranges, 10, seed=1) != sample_space(DISCRETE, ranges, 10, seed=2)


def test_a_huge_product_is_sampled_without_materializing_it():
    discrete = {f"p{i}": list(range(10)) for i in range(12)}  # 10**12 combinations
    trials = sample_space(discrete, {}, 1000, seed=0)
    assert len({tuple(t.values()) for t in trials}) == 1000
    assert all(0 <= v <= 9 for t in trials for v in t.values())


def test_no_parameters_gives_n_empty_assignments():
    assert sample_space({}, {}, 3) == [{}, {}, {}]


@pytest.mark.parametrize(
    ("low", "high", "scale"), [(1.0, 1.0, "linear"), (2.0, 1.0, "linear"), (0.0, 1.0, "log")]
)
def test_invalid_ranges_are_refused(low, high, scale):
    with pytest.raises(ValueError):
        Range(low, high, scale=scale)


def test_rounding_never_leaves_the_interval():
    edge = Range(1.0000004, 1.0000009)
    assert all(edge.low <= v <= edge.high for v in edge.sample(200, random.Random(0)))
