"""The shared statistics helpers (``infradoctor.stats``) against numpy, on seeded random data."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from infradoctor.stats import (
    evenly_spaced,
    histogram_quantile,
    histogram_sample,
    nearest_rank,
    quantile,
    subsample,
)

QS = (0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0)


def test_quantile_and_nearest_rank_match_numpy() -> None:
    rng = np.random.default_rng(7)
    for _ in range(60):
        values = sorted(rng.exponential(10.0, size=int(rng.integers(1, 400))).tolist())
        for q in QS:
            assert quantile(values, q) == pytest.approx(float(np.quantile(values, q)))
            # numpy's inverted_cdf is the nearest-rank definition: the smallest x with F(x) >= q.
            assert nearest_rank(values, q) == float(np.quantile(values, q, method="inverted_cdf"))
            assert nearest_rank(values, q) in values
    assert math.isnan(nearest_rank([], 0.5)) and math.isnan(quantile([], 0.5))
    assert nearest_rank([1.0, 2.0, 3.0], 1.5) == 3.0 and nearest_rank([1.0, 2.0, 3.0], -1) == 1.0


def test_nearest_rank_small_cases() -> None:
    values = [float(v) for v in range(1, 101)]
    assert nearest_rank(values, 0.99) == 99.0 and nearest_rank(values, 0.5) == 50.0
    assert nearest_rank([4.0], 0.99) == 4.0


def test_histogram_quantile_matches_numpy_and_ignores_the_excluded_key() -> None:
    rng = np.random.default_rng(11)
    for _ in range(50):
        values = rng.integers(0, 300, size=int(rng.integers(1, 300)))
        hist = Counter(int(v) for v in values)
        for q in QS:
            assert histogram_quantile(hist, q) == pytest.approx(float(np.quantile(values, q)))
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


def test_subsample_is_deterministic_and_bounded() -> None:
    values = [float(v) for v in range(10_000)]
    assert subsample(values, 100, seed=3) == subsample(values, 100, seed=3)
    assert len(subsample(values, 100)) == 100 and set(subsample(values, 100)) <= set(values)
    assert subsample([1, 2], 100) == [1.0, 2.0]
