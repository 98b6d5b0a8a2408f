"""The shared statistics helpers (``infradoctor.stats``) against numpy, on seeded random data."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from infradoctor.stats import (
    bootstrap_differences,
    evenly_spaced,
    histogram_quantile,
    histogram_sample,
    percentile,
    quantile,
    quantile_ci,
    quantile_ranks,
)

QS = (0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0)


def test_quantile_is_nearest_rank_as_numpy_inverted_cdf() -> None:
    rng = np.random.default_rng(7)
    for _ in range(60):
        values = sorted(rng.exponential(10.0, size=int(rng.integers(1, 400))).tolist())
        for q in QS:
            # numpy's inverted_cdf is the nearest-rank definition: the smallest x with F(x) >= q.
            assert quantile(values, q) == float(np.quantile(values, q, method="inverted_cdf"))
            assert quantile(values, q) in values
            assert percentile(list(reversed(values)), q * 100) == quantile(values, q)
    assert math.isnan(quantile([], 0.5)) and percentile([], 50) is None
    assert quantile([1.0, 2.0, 3.0], 1.5) == 3.0 and quantile([1.0, 2.0, 3.0], -1) == 1.0


def test_quantile_small_cases() -> None:
    values = [float(v) for v in range(1, 101)]
    assert quantile(values, 0.99) == 99.0 and quantile(values, 0.5) == 50.0
    assert quantile([4.0], 0.99) == 4.0


def test_quantile_interval_covers_the_true_quantile_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(3)
    true_p90 = float(np.log(10.0))  # exponential(1): F^-1(0.9)
    covered = 0
    for _ in range(400):
        values = sorted(rng.exponential(1.0, size=300).tolist())
        value, low, high = quantile_ci(values, 0.9)
        assert low <= value <= high
        covered += low <= true_p90 <= high
    assert 0.92 <= covered / 400 <= 0.995
    assert quantile_ranks(1000, 0.99) == (983, 998) and quantile_ranks(0, 0.5) == (0, 0)
    assert all(math.isnan(v) for v in quantile_ci([], 0.5))


def test_bootstrap_difference_sign_interval_and_determinism() -> None:
    rng = np.random.default_rng(9)
    slow = (rng.exponential(1.0, size=500) + 2.0).tolist()
    fast = rng.exponential(1.0, size=500).tolist()
    found = bootstrap_differences(slow, fast, ["mean", "p50", "p99"], resamples=200, seed=1)
    diff, low, high = found["mean"]
    assert low <= diff <= high and low > 1.7 and high < 2.3  # x - y, about +2
    assert found == bootstrap_differences(slow, fast, ["mean", "p50", "p99"], resamples=200, seed=1)
    same = bootstrap_differences(fast, list(reversed(fast)), ["p50"], resamples=200)["p50"]
    assert same[1] <= 0.0 <= same[2]
    assert all(math.isnan(v) for v in bootstrap_differences([], fast, ["mean"])["mean"])
    one = bootstrap_differences([1.0], fast, ["mean"])["mean"]
    assert not math.isnan(one[0]) and math.isnan(one[1])


def test_histogram_quantile_is_the_same_quantile_and_ignores_the_excluded_key() -> None:
    rng = np.random.default_rng(11)
    for _ in range(50):
        values = rng.integers(0, 300, size=int(rng.integers(1, 300)))
        hist = Counter(int(v) for v in values)
        for q in QS:
            assert histogram_quantile(hist, q) == quantile(sorted(float(v) for v in values), q)
        with_unknown = {**hist, -1: 1000}
        assert histogram_quantile(with_unknown, 0.5, exclude=-1) == histogram_quantile(hist, 0.5)
    assert histogram_quantile({}, 0.5) is None and histogram_quantile({-1: 3}, 0.5, exclude=-1) is None
    assert histogram_quantile({5: 0}, 0.5) is None


def test_histogram_sample_keeps_the_distribution() -> None:
    rng = np.random.default_rng(5)
    values = rng.integers(0, 1000, size=20_000)
    hist = Counter(int(v) for v in values)
    sample = histogram_sample(hist, 2000)
    assert len(sample) == 2000 and sample == sorted(sample)
    for q in (0.1, 0.5, 0.9):
        assert abs(float(np.quantile(sample, q)) - float(np.quantile(values, q))) <= 5
    small = {3: 2, 7: 1}
    assert histogram_sample(small, 10) == [3.0, 3.0, 7.0]
    assert histogram_sample({}, 10) == [] and histogram_sample({-1: 4, 2: 1}, 10, exclude=-1) == [2.0]


def test_evenly_spaced_keeps_order_and_bound() -> None:
    values = [float(v) for v in range(12_345)]
    picked = evenly_spaced(values, 5000)
    assert len(picked) == 5000 and picked == sorted(picked) and picked[0] == 0.0
    gaps = {b - a for a, b in zip(picked, picked[1:], strict=False)}
    assert gaps <= {2.0, 3.0}
    assert evenly_spaced([1, 2, 3], 5) == [1.0, 2.0, 3.0] and evenly_spaced([1, 2], 0) == []


