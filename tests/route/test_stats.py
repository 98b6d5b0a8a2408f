import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infradoctor.route.stats import (
    chi_square_goodness_of_fit,
    chi_square_sf,
    mann_whitney_greater,
    quantile,
    quantile_ci,
    quantile_difference,
    thin,
    two_proportion_greater,
)


def test_nearest_rank_quantile() -> None:
    values = [float(v) for v in range(1, 101)]
    assert quantile(values, 0.5) == 50.0
    assert quantile(values, 0.99) == 99.0
    assert quantile(values, 1.0) == 100.0
    assert quantile([], 0.5) is None


@pytest.mark.parametrize(
    ("statistic", "df", "expected"),
    [(3.841458820694124, 1, 0.05), (5.991464547107979, 2, 0.05), (11.34486673014437, 3, 0.01), (0.0, 3, 1.0)],
)
def test_chi_square_matches_tabulated_critical_values(statistic: float, df: int, expected: float) -> None:
    assert chi_square_sf(statistic, df) == pytest.approx(expected, rel=1e-6)


def test_chi_square_large_statistic_uses_continued_fraction() -> None:
    # P(X > 50 | df=2) = exp(-25)
    assert chi_square_sf(50.0, 2) == pytest.approx(math.exp(-25.0), rel=1e-9)


def test_goodness_of_fit() -> None:
    chi2, df, p = chi_square_goodness_of_fit([750, 250], [0.5, 0.5])
    assert df == 1 and chi2 == pytest.approx(250.0) and p < 1e-50
    _, _, p_weighted = chi_square_goodness_of_fit([750, 250], [3, 1])
    assert p_weighted == pytest.approx(1.0)
    assert chi_square_goodness_of_fit([], []) == (0.0, 0, 1.0)


def test_quantile_ci_covers_the_true_median_about_95_percent_of_the_time() -> None:
    rng = random.Random(7)
    covered = 0
    trials = 300
    for _ in range(trials):
        values = sorted(rng.expovariate(1.0) for _ in range(200))
        est = quantile_ci(values, 0.5)
        assert est.low is not None and est.high is not None
        covered += est.low <= math.log(2) <= est.high
    assert 0.9 <= covered / trials <= 0.99


def test_quantile_difference_recovers_a_known_shift_and_is_deterministic() -> None:
    rng = random.Random(3)
    direct = [rng.gauss(10.0, 1.0) for _ in range(1500)]
    routed = [rng.gauss(12.0, 1.0) for _ in range(1500)]
    est = quantile_difference(routed, direct, 0.5, seed=1)
    assert est.low is not None and est.high is not None
    assert est.low < 2.0 < est.high and est.high - est.low < 0.4
    assert est == quantile_difference(routed, direct, 0.5, seed=1)
    same = quantile_difference(direct[:700], direct[700:], 0.5, seed=1)
    assert same.low is not None and same.high is not None and same.low < 0 < same.high


def test_mann_whitney_one_sided() -> None:
    rng = random.Random(5)
    a = [rng.gauss(1.0, 1.0) for _ in range(300)]
    b = [rng.gauss(0.0, 1.0) for _ in range(300)]
    p_greater = mann_whitney_greater(a, b)
    p_less = mann_whitney_greater(b, a)
    assert p_greater is not None and p_greater < 1e-20
    assert p_less is not None and p_less > 0.99
    assert mann_whitney_greater([1.0], [2.0]) is None
    tied = mann_whitney_greater([1.0] * 50, [1.0] * 50)
    assert tied is not None and tied >= 0.5


def test_two_proportion() -> None:
    p = two_proportion_greater(30, 100, 10, 200)
    assert p is not None and p < 1e-6
    assert two_proportion_greater(0, 100, 0, 100) == 1.0
    assert two_proportion_greater(1, 0, 1, 1) is None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=300), st.floats(0.01, 0.99))
def test_quantile_ci_brackets_the_estimate(values: list[float], q: float) -> None:
    ordered = sorted(values)
    est = quantile_ci(ordered, q)
    assert est.low is not None and est.value is not None and est.high is not None
    assert est.low <= est.value <= est.high


def test_thin_keeps_order_and_bound() -> None:
    values = [float(i) for i in range(10_000)]
    thinned = thin(values, 5000)
    assert len(thinned) == 5000 and thinned == sorted(thinned) and thinned[0] == 0.0
    assert thin(values[:10], 5000) == values[:10]
