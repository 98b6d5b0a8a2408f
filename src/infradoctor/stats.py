"""Small, dependency-free statistics: quantiles and bootstrap confidence intervals (seeded, deterministic)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence

Statistic = Callable[[Sequence[float]], float]


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default) of already sorted values; NaN when empty."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    if n == 1:
        return float(sorted_values[0])
    pos = min(max(q, 0.0), 1.0) * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return float(sorted_values[lo]) * (1 - frac) + float(sorted_values[hi]) * frac


def nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of already sorted values; NaN when empty.

    The smallest value with at least ``q`` of the values at or below it: always an observed value, never
    interpolated.
    """
    n = len(sorted_values)
    if n == 0:
        return math.nan
    rank = math.ceil(min(max(q, 0.0), 1.0) * n)
    return float(sorted_values[min(n, max(1, rank)) - 1])


def _histogram_items(hist: Mapping[int, int], exclude: int | None) -> tuple[list[tuple[int, int]], int]:
    items = sorted((k, c) for k, c in hist.items() if k != exclude and c > 0)
    return items, sum(c for _, c in items)


def histogram_quantile(hist: Mapping[int, int], q: float, *, exclude: int | None = None) -> float | None:
    """The q-quantile (0-1) of a value->count histogram; None when empty.

    Linear between order statistics, like :func:`quantile` (numpy's default). The key ``exclude`` (a sentinel
    such as "unknown") is ignored.
    """
    items, total = _histogram_items(hist, exclude)
    if total == 0:
        return None
    position = min(max(q, 0.0), 1.0) * (total - 1)
    low_rank = int(position)
    high_rank = min(low_rank + 1, total - 1)
    low = high = None
    seen = 0
    for value, count in items:
        seen += count
        if low is None and seen > low_rank:
            low = value
        if seen > high_rank:
            high = value
            break
    assert low is not None and high is not None
    return low + (high - low) * (position - low_rank)


def histogram_sample(hist: Mapping[int, int], limit: int, *, exclude: int | None = None) -> list[float]:
    """A deterministic sample of at most ``limit`` values with the histogram's distribution, ascending.

    The value at the middle rank of each of ``limit`` equal slices. The key ``exclude`` is ignored.
    """
    items, total = _histogram_items(hist, exclude)
    if total == 0 or limit <= 0:
        return []
    n = min(limit, total)
    ranks = [((2 * i + 1) * total) // (2 * n) for i in range(n)]
    out: list[float] = []
    index = seen = 0
    for rank in ranks:
        while seen + items[index][1] <= rank:
            seen += items[index][1]
            index += 1
        out.append(float(items[index][0]))
    return out


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; NaN when empty."""
    return math.fsum(values) / len(values) if values else math.nan


def statistic(name: str) -> Statistic:
    """A statistic by name: ``mean`` or ``pNN`` (``p50``, ``p99``, ``p99.9``)."""
    if name == "mean":
        return mean
    if name.startswith("p"):
        q = float(name[1:]) / 100.0
        return lambda values: quantile(sorted(values), q)
    raise ValueError(f"unknown statistic {name!r}")


def subsample(values: Sequence[float], limit: int, seed: int = 0) -> list[float]:
    """At most ``limit`` values, chosen deterministically (seeded) when there are more."""
    if len(values) <= limit:
        return [float(v) for v in values]
    rng = random.Random(seed)
    return [float(v) for v in rng.sample(list(values), limit)]


def evenly_spaced(values: Sequence[float], limit: int) -> list[float]:
    """At most ``limit`` values, evenly strided through ``values``.

    Deterministic and in the original order (right for a time series).
    """
    n = len(values)
    if n <= limit:
        return [float(v) for v in values]
    if limit <= 0:
        return []
    stride = n / limit
    return [float(values[int(i * stride)]) for i in range(limit)]


def bootstrap_diff_ci(
    before: Sequence[float],
    after: Sequence[float],
    stat: Statistic,
    *,
    resamples: int = 400,
    confidence: float = 0.95,
    seed: int = 20261129,
    max_samples: int = 2000,
) -> tuple[float, float, float]:
    """Statistic(after) - statistic(before), with a percentile-bootstrap confidence interval (diff, low, high).

    Each side is resampled with replacement independently; both sides are capped at ``max_samples`` values
    (deterministic subsample) so the cost stays bounded.
    """
    if not before or not after:
        return math.nan, math.nan, math.nan
    b = subsample(before, max_samples, seed)
    a = subsample(after, max_samples, seed + 1)
    diff = stat(a) - stat(b)
    rng = random.Random(seed)
    diffs: list[float] = []
    nb, na = len(b), len(a)
    for _ in range(resamples):
        rb = [b[rng.randrange(nb)] for _ in range(nb)]
        ra = [a[rng.randrange(na)] for _ in range(na)]
        diffs.append(stat(ra) - stat(rb))
    diffs.sort()
    alpha = (1 - confidence) / 2
    return diff, quantile(diffs, alpha), quantile(diffs, 1 - alpha)


def order_statistic_ci(n: int, q: float, confidence: float = 0.95) -> tuple[int, int]:
    """Ranks (0-based, inclusive) bounding the q-quantile of n samples (normal approximation to the binomial)."""
    if n <= 0:
        return 0, 0
    z = _z(confidence)
    centre = n * q
    half = z * math.sqrt(n * q * (1 - q))
    lo = max(0, math.floor(centre - half) - 1)
    hi = min(n - 1, math.ceil(centre + half))
    return lo, hi


def _z(confidence: float) -> float:
    # Two-sided normal quantiles for the usual confidence levels; 95% by default.
    table = {0.9: 1.6449, 0.95: 1.96, 0.98: 2.3263, 0.99: 2.5758}
    return table.get(round(confidence, 2), 1.96)
