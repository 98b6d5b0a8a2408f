"""Distribution-free statistics for route attribution, in pure Python (no numpy needed).

Percentiles are nearest-rank (the value at rank ``ceil(q * n)``), as an HDR histogram reports them. Their confidence
intervals are order-statistic intervals (binomial, normal approximation), which need no distributional assumption.
The router's added latency (a difference of two quantiles) gets a seeded percentile-bootstrap interval, and the
shift of the whole distribution a one-sided Mann-Whitney U test. Shares across backends are tested with Pearson's
chi-square goodness-of-fit test; one backend's error rate against the others with a two-proportion z-test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from infradoctor import stats
from infradoctor.stats import BOOTSTRAP_MAX_SAMPLES, BOOTSTRAP_RESAMPLES, Z_95, evenly_spaced


@dataclass(frozen=True)
class Estimate:
    """A point estimate with a confidence interval."""

    value: float | None
    """The estimate (None without data)."""
    low: float | None
    """Lower end of the confidence interval (None when it cannot be computed)."""
    high: float | None
    """Upper end of the confidence interval."""

    def to_dict(self) -> dict[str, float | None]:
        """JSON form: ``{"value", "ci_low", "ci_high"}`` rounded to microseconds for ms values."""
        return {"value": _round(self.value), "ci_low": _round(self.low), "ci_high": _round(self.high)}

    @property
    def excludes_zero_above(self) -> bool:
        """True when the whole interval lies above zero."""
        return self.low is not None and self.low > 0


NA = Estimate(None, None, None)
"""An estimate that could not be made (no data)."""


def _round(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)


def quantile(sorted_values: Sequence[float], q: float) -> float | None:
    """:func:`infradoctor.stats.quantile` of already sorted values; None when empty."""
    return stats.quantile(sorted_values, q) if sorted_values else None


def quantile_ci(sorted_values: Sequence[float], q: float, z: float = Z_95) -> Estimate:
    """Quantile with its order-statistic confidence interval (ranks ``nq -/+ z sqrt(nq(1-q))``)."""
    if not sorted_values:
        return NA
    return Estimate(*stats.quantile_ci(sorted_values, q, z))


def thin(values: Sequence[float], limit: int) -> list[float]:
    """At most ``limit`` values, every k-th one (deterministic, keeps time order and the distribution's shape)."""
    return evenly_spaced(values, limit)


def quantile_difference(
    a: Sequence[float],
    b: Sequence[float],
    q: float,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> Estimate:
    """``quantile(a, q) - quantile(b, q)`` with a seeded percentile-bootstrap confidence interval."""
    return quantile_differences(a, b, (q,), resamples=resamples, seed=seed, confidence=confidence)[q]


def quantile_differences(
    a: Sequence[float],
    b: Sequence[float],
    qs: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[float, Estimate]:
    """:func:`quantile_difference` at several quantiles from the same resamples (one bootstrap, not one per q)."""
    names = {q: f"p{q * 100:g}" for q in qs}
    found = stats.bootstrap_differences(a, b, list(names.values()), resamples=resamples, seed=seed,
                                        confidence=confidence, max_samples=BOOTSTRAP_MAX_SAMPLES)
    out: dict[float, Estimate] = {}
    for q, name in names.items():
        value, low, high = found[name]
        out[q] = Estimate(None if math.isnan(value) else value, None if math.isnan(low) else low,
                          None if math.isnan(high) else high)
    return out


def normal_sf(z: float) -> float:
    """Upper tail of the standard normal, ``P(Z > z)``."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney_greater(a: Sequence[float], b: Sequence[float]) -> float | None:
    """One-sided p-value that ``a`` tends to be larger than ``b`` (Mann-Whitney U, normal approx., tie-corrected)."""
    n1, n2 = len(a), len(b)
    if n1 < 2 or n2 < 2:
        return None
    pooled = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    rank_sum_a = 0.0
    tie_term = 0.0
    i = 0
    n = n1 + n2
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        mid_rank = (i + j) / 2.0 + 1.0
        count = j - i + 1
        if count > 1:
            tie_term += count**3 - count
        rank_sum_a += mid_rank * sum(1 for k in range(i, j + 1) if pooled[k][1] == 0)
        i = j + 1
    u = rank_sum_a - n1 * (n1 + 1) / 2.0
    mean = n1 * n2 / 2.0
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (u - mean - 0.5) / math.sqrt(var)  # continuity correction
    return normal_sf(z)


def chi_square_sf(statistic: float, df: int) -> float:
    """``P(X > statistic)`` for a chi-square variable with ``df`` degrees of freedom."""
    if df <= 0:
        return 1.0
    if statistic <= 0:
        return 1.0
    return _gamma_q(df / 2.0, statistic / 2.0)


def chi_square_goodness_of_fit(observed: Sequence[int], expected_shares: Sequence[float]) -> tuple[float, int, float]:
    """Pearson's chi-square of counts against expected shares: ``(statistic, degrees of freedom, p-value)``."""
    total = sum(observed)
    share_total = sum(expected_shares)
    if total == 0 or share_total <= 0 or len(observed) < 2:
        return 0.0, 0, 1.0
    statistic = 0.0
    cells = 0
    for count, share in zip(observed, expected_shares, strict=True):
        expected = total * share / share_total
        if expected <= 0:
            continue
        statistic += (count - expected) ** 2 / expected
        cells += 1
    df = cells - 1
    return statistic, df, chi_square_sf(statistic, df)


def two_proportion_greater(x1: int, n1: int, x2: int, n2: int) -> float | None:
    """One-sided p-value that rate ``x1/n1`` exceeds ``x2/n2`` (pooled two-proportion z-test)."""
    if n1 == 0 or n2 == 0:
        return None
    pooled = (x1 + x2) / (n1 + n2)
    if pooled in (0.0, 1.0):
        return 1.0
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    return normal_sf((x1 / n1 - x2 / n2) / se)


def _gamma_q(a: float, x: float) -> float:
    """Regularised upper incomplete gamma ``Q(a, x)`` (series below ``a + 1``, Lentz continued fraction above)."""
    if x < a + 1.0:
        term = 1.0 / a
        total = term
        ap = a
        for _ in range(1000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        p = total * math.exp(-x + a * math.log(x) - math.lgamma(a))
        return max(0.0, min(1.0, 1.0 - p))
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        if abs(d) < tiny:
            d = tiny
        c = b + an / c
        if abs(c) < tiny:
            c = tiny
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return max(0.0, min(1.0, math.exp(-x + a * math.log(x) - math.lgamma(a)) * h))
