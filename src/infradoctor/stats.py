"""The package's statistics: one quantile definition, one interval for a quantile, one bootstrap (seeded).

Every percentile in every command is :func:`quantile` (nearest rank); every interval for a quantile is
:func:`quantile_ci` (order statistics); every interval for a difference is :func:`bootstrap_differences`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Statistic = Callable[[Sequence[float]], float]


Z_95 = 1.959963984540054
"""Two-sided 95% standard normal quantile."""


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile (0-1) of already sorted values; NaN when empty.

    The one definition every metric uses: nearest rank, the smallest value with at least ``q`` of the values at
    or below it (numpy's ``inverted_cdf``, what HDR histograms and ``hey`` report). Always an observed value,
    never interpolated, so a p99 is a latency some request really had.
    """
    n = len(sorted_values)
    if n == 0:
        return math.nan
    return float(sorted_values[nearest_rank(n, q) - 1])


def nearest_rank(n: int, q: float) -> int:
    """The 1-based rank of the q-quantile (0-1, clamped) of ``n`` values, as :func:`quantile` reads it.

    ``ceil(q * n)``, at least 1 and at most ``n`` (1 when there are no values); histograms read their percentiles
    at the same ranks.
    """
    return min(max(n, 1), max(1, math.ceil(min(max(q, 0.0), 1.0) * n)))


def percentile(values: Sequence[float], pct: float) -> float | None:
    """:func:`quantile` of unsorted values at ``pct`` (0-100); None when empty."""
    return quantile(sorted(values), pct / 100.0) if values else None


def quantile_ranks(n: int, q: float, z: float = Z_95) -> tuple[int, int]:
    """1-based ranks of the order statistics bounding the q-quantile of ``n`` samples (distribution-free).

    The true quantile lies between ranks ``n*q -/+ z*sqrt(n*q*(1-q))`` with the confidence of ``z`` for
    independent samples (normal approximation to the binomial). When the upper rank is ``n``, the interval's top
    is just the largest value: too few samples for it to say more. Latencies under load are correlated, so read
    the interval as a lower bound on the uncertainty.
    """
    if n <= 0:
        return 0, 0
    spread = z * math.sqrt(n * q * (1.0 - q))
    return max(1, math.floor(n * q - spread)), min(n, math.ceil(n * q + spread) + 1)


def quantile_ci(sorted_values: Sequence[float], q: float, z: float = Z_95) -> tuple[float, float, float]:
    """(quantile, low, high) of already sorted values, the interval from :func:`quantile_ranks`; NaNs when empty."""
    n = len(sorted_values)
    if n == 0:
        return math.nan, math.nan, math.nan
    lo, hi = quantile_ranks(n, q, z)
    return quantile(sorted_values, q), float(sorted_values[lo - 1]), float(sorted_values[hi - 1])


def _histogram_items(hist: Mapping[int, int], exclude: int | None) -> tuple[list[tuple[int, int]], int]:
    items = sorted((k, c) for k, c in hist.items() if k != exclude and c > 0)
    return items, sum(c for _, c in items)


def histogram_quantile(hist: Mapping[int, int], q: float, *, exclude: int | None = None) -> float | None:
    """The q-quantile (0-1) of a value->count histogram, as :func:`quantile` defines it; None when empty.

    The key ``exclude`` (a sentinel such as "unknown") is ignored.
    """
    items, total = _histogram_items(hist, exclude)
    if total == 0:
        return None
    rank = nearest_rank(total, q)
    seen = 0
    for value, count in items:
        seen += count
        if seen >= rank:
            return float(value)
    return float(items[-1][0])


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
    """A statistic by name: ``mean`` or ``pNN`` (``p50``, ``p99``, ``p99.9``), quantiles as :func:`quantile`."""
    if name == "mean":
        return mean
    if name.startswith("p"):
        q = float(name[1:]) / 100.0
        return lambda values: quantile(sorted(values), q)
    raise ValueError(f"unknown statistic {name!r}")


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


BOOTSTRAP_RESAMPLES = 400
"""Resamples for a bootstrap interval (enough for a 95% interval's endpoints)."""

BOOTSTRAP_MAX_SAMPLES = 3000
"""Each side is thinned (evenly, deterministically) to at most this many values first, so the cost is bounded."""


def bootstrap_differences(
    x: Sequence[float],
    y: Sequence[float],
    statistics: Sequence[str],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
    max_samples: int = BOOTSTRAP_MAX_SAMPLES,
) -> dict[str, tuple[float, float, float]]:
    """``statistic(x) - statistic(y)`` for each named statistic, with percentile-bootstrap intervals.

    Returns ``{name: (difference, low, high)}`` for each name of :func:`statistic`; NaNs when a side is empty, no
    interval (NaN ends) with fewer than 2 values on a side.

    The one bootstrap of the package (``compare``: after - before; ``route``: routed - direct). Both sides are
    resampled with replacement independently, from the same resamples for every statistic; vectorised with numpy
    where it is installed (the draws then come from numpy's seeded generator), pure Python otherwise.
    """
    if not x or not y:
        return dict.fromkeys(statistics, (math.nan, math.nan, math.nan))
    tx = [float(v) for v in evenly_spaced(x, max_samples)]
    ty = [float(v) for v in evenly_spaced(y, max_samples)]
    point = {name: statistic(name)(x) - statistic(name)(y) for name in statistics}
    if len(tx) < 2 or len(ty) < 2:
        return {name: (point[name], math.nan, math.nan) for name in statistics}
    rounds = max(1, resamples)
    diffs = _resampled_differences(tx, ty, statistics, rounds, seed)
    tail = (1.0 - confidence) / 2.0
    out: dict[str, tuple[float, float, float]] = {}
    for name in statistics:
        values = sorted(diffs[name])
        low = values[max(0, math.floor(tail * len(values)))]
        high = values[min(len(values) - 1, math.ceil((1.0 - tail) * len(values)) - 1)]
        out[name] = (point[name], low, high)
    return out


def _resampled_differences(
    x: list[float], y: list[float], statistics: Sequence[str], rounds: int, seed: int
) -> dict[str, list[float]]:
    try:
        import numpy as np
    except ModuleNotFoundError:
        rng = random.Random(seed)
        diffs: dict[str, list[float]] = {name: [] for name in statistics}
        for _ in range(rounds):
            rx = sorted(rng.choices(x, k=len(x)))
            ry = sorted(rng.choices(y, k=len(y)))
            for name in statistics:
                diffs[name].append(_of_sorted(name, rx) - _of_sorted(name, ry))
        return diffs
    gen = np.random.default_rng(seed)
    ax, ay = np.asarray(x), np.asarray(y)
    out: dict[str, list[float]] = {name: [] for name in statistics}
    chunk = max(1, 2_000_000 // max(len(x), len(y)))  # bounded memory: at most ~16 MB of draws at a time
    for start in range(0, rounds, chunk):
        k = min(chunk, rounds - start)
        rows_x = np.sort(ax[gen.integers(0, len(x), size=(k, len(x)))], axis=1)
        rows_y = np.sort(ay[gen.integers(0, len(y), size=(k, len(y)))], axis=1)
        for name in statistics:
            out[name].extend((_of_sorted_rows(name, rows_x) - _of_sorted_rows(name, rows_y)).tolist())
    return out


def _of_sorted(name: str, values: Sequence[float]) -> float:
    return mean(values) if name == "mean" else quantile(values, float(name[1:]) / 100.0)


def _of_sorted_rows(name: str, rows: Any) -> Any:
    if name == "mean":
        return rows.mean(axis=1)
    return rows[:, nearest_rank(rows.shape[1], float(name[1:]) / 100.0) - 1]
