"""A compact, mergeable log-linear latency histogram (HdrHistogram-style, 3 significant digits).

Values are recorded as integer microseconds. Values below 2048 us are counted exactly; above, each power of two is
split into 1024 linear sub-buckets, so any recorded value is known to within 1/1024 (about 0.1%) of itself. The
counts live in an ``array('q')`` that grows only to the largest value seen: a run of any length over latencies up
to an hour needs at most about 25k counters (200 kB), so memory is bounded regardless of run length. Two
histograms merge by adding counts, which is how workers, points and streams combine without keeping samples.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from infradoctor.stats import Z_95, nearest_rank, quantile_ranks

SUB_BUCKET_BITS = 10
"""Linear sub-buckets per power of two: 2**10 = 1024, i.e. 3 significant decimal digits."""
_SUB = 1 << SUB_BUCKET_BITS
_EXACT = _SUB << 1  # values below 2048 us are counted exactly
MAX_VALUE_US = (1 << 42) - 1
"""Largest recordable value (about 50 days); larger values are clamped."""

STANDARD_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)
"""The percentiles every point reports."""



def bucket_bounds(index: int) -> tuple[int, int]:
    """Lowest and highest value (us, inclusive) that map to a counter index."""
    if index < _EXACT:
        return index, index
    k = index - _EXACT
    shift = k // _SUB + 1
    mantissa = _SUB + k % _SUB
    return mantissa << shift, ((mantissa + 1) << shift) - 1


def bucket_value(index: int) -> float:
    """Representative value (us) of a counter: the middle of its range."""
    low, high = bucket_bounds(index)
    return (low + high) / 2.0


class Histogram:
    """Counts of latencies in microseconds, with exact count, sum, min and max."""

    __slots__ = ("counts", "count", "total_us", "min_us", "max_us")

    def __init__(self) -> None:
        self.counts: array[int] = array("q")
        self.count = 0
        self.total_us = 0
        self.min_us = 0
        self.max_us = 0

    def record(self, value_us: int) -> None:
        """Count one value (negative values count as 0; huge ones are clamped)."""
        if value_us < 0:
            value_us = 0
        elif value_us > MAX_VALUE_US:
            value_us = MAX_VALUE_US
        if value_us < _EXACT:
            index = value_us
        else:
            shift = value_us.bit_length() - SUB_BUCKET_BITS - 1
            index = _EXACT + (shift - 1) * _SUB + ((value_us >> shift) - _SUB)
        counts = self.counts
        if index >= len(counts):
            counts.frombytes(bytes(8 * (index + 1 - len(counts) + _SUB)))
        counts[index] += 1
        if self.count == 0 or value_us < self.min_us:
            self.min_us = value_us
        if value_us > self.max_us:
            self.max_us = value_us
        self.count += 1
        self.total_us += value_us

    def record_seconds(self, seconds: float) -> None:
        """Count one value given in seconds."""
        self.record(int(seconds * 1e6 + 0.5))

    def record_seconds_batch(self, seconds: Sequence[float], *, use_numpy: bool = True) -> tuple[int, int]:
        """Count many values given in seconds (e.g. an ``array('d')``); returns their sum and max in microseconds.

        Exactly what :meth:`record_seconds` on each value would count, but vectorised with numpy when it is
        installed (the load engine's hot path appends latencies to a buffer and folds it here in batches).
        """
        n = len(seconds)
        if n == 0:
            return 0, 0
        np = _numpy() if use_numpy else None
        if np is None:
            total = peak = 0
            record = self.record
            for value in seconds:
                value_us = int(value * 1e6 + 0.5)
                value_us = 0 if value_us < 0 else MAX_VALUE_US if value_us > MAX_VALUE_US else value_us
                record(value_us)
                total += value_us
                if value_us > peak:
                    peak = value_us
            return total, peak
        values = np.clip(np.asarray(seconds, dtype=np.float64) * 1e6 + 0.5, 0.0, float(MAX_VALUE_US))
        ints = values.astype(np.int64)  # truncation, as int() does for these non-negative values
        big = ints >= _EXACT
        index = ints.copy()
        if big.any():
            large = ints[big]
            # bit_length of an exact integer below 2**53 is frexp's exponent
            shift = np.frexp(large.astype(np.float64))[1].astype(np.int64) - SUB_BUCKET_BITS - 1
            index[big] = _EXACT + (shift - 1) * _SUB + ((large >> shift) - _SUB)
        top = int(index.max())
        counts = self.counts
        if top >= len(counts):
            counts.frombytes(bytes(8 * (top + 1 - len(counts) + _SUB)))
        view = np.frombuffer(memoryview(counts), dtype=np.int64)  # shares the array's memory
        view[: top + 1] += np.bincount(index, minlength=top + 1)
        total, low, peak = int(ints.sum()), int(ints.min()), int(ints.max())
        if self.count == 0 or low < self.min_us:
            self.min_us = low
        if peak > self.max_us:
            self.max_us = peak
        self.count += n
        self.total_us += total
        return total, peak

    def merge(self, other: Histogram) -> None:
        """Add another histogram's counts into this one."""
        if other.count == 0:
            return
        if len(other.counts) > len(self.counts):
            self.counts.frombytes(bytes(8 * (len(other.counts) - len(self.counts))))
        counts = self.counts
        for index, value in enumerate(other.counts):
            if value:
                counts[index] += value
        if self.count == 0 or other.min_us < self.min_us:
            self.min_us = other.min_us
        self.max_us = max(self.max_us, other.max_us)
        self.count += other.count
        self.total_us += other.total_us

    @classmethod
    def merged(cls, histograms: Iterable[Histogram]) -> Histogram:
        """A new histogram holding the sum of several."""
        out = cls()
        for hist in histograms:
            out.merge(hist)
        return out

    @property
    def mean_us(self) -> float:
        """Exact mean (NaN when empty)."""
        return self.total_us / self.count if self.count else math.nan

    def values_at_ranks(self, ranks: Sequence[int]) -> list[float]:
        """Values (us) of the given 1-based order statistics, in one pass; the max rank gives the exact max."""
        out = [math.nan] * len(ranks)
        if not self.count:
            return out
        order = sorted(range(len(ranks)), key=lambda i: ranks[i])
        cumulative = 0
        pos = 0
        for index, value in enumerate(self.counts):
            if not value:
                continue
            cumulative += value
            while pos < len(order) and ranks[order[pos]] <= cumulative:
                rank = ranks[order[pos]]
                if rank >= self.count:
                    out[order[pos]] = float(self.max_us)
                elif rank <= 1:
                    out[order[pos]] = float(self.min_us)
                else:
                    # a bucket's middle, within what was recorded (never below the min or above the max)
                    out[order[pos]] = max(min(bucket_value(index), float(self.max_us)), float(self.min_us))
                pos += 1
            if pos == len(order):
                break
        return out

    def percentiles_us(self, percentiles: Sequence[float]) -> list[float]:
        """Values (us) at percentiles (0-100), nearest-rank definition."""
        return self.values_at_ranks([nearest_rank(self.count, p / 100.0) for p in percentiles])

    def quantile_ci_us(self, quantile: float, z: float = Z_95) -> tuple[float, float]:
        """Distribution-free confidence interval (us) for a quantile from binomial order statistics.

        The true q-quantile lies between the order statistics of ranks ``n*q -/+ z*sqrt(n*q*(1-q))`` with about 95%
        confidence for independent samples (normal approximation of the binomial). Latencies under load are
        correlated, so read the interval as a lower bound on the uncertainty.
        """
        if self.count == 0:
            return math.nan, math.nan
        lo_v, hi_v = self.values_at_ranks(list(self.quantile_ci_ranks(quantile, z)))
        return lo_v, hi_v

    def quantile_ci_ranks(self, quantile: float, z: float = Z_95) -> tuple[int, int]:
        """The 1-based ranks that bound :meth:`quantile_ci_us`.

        When the upper one is the count, the interval's top is simply the slowest value: too few values for the
        interval to say anything about that side.
        """
        return quantile_ranks(self.count, quantile, z)

    def summary_ms(self) -> dict[str, float | int | list[float] | None]:
        """JSON summary in milliseconds: count, min, mean, p50/p90/p95/p99/p99.9, max and the p99 95% CI."""
        if not self.count:
            return {"count": 0}
        values = self.percentiles_us(STANDARD_PERCENTILES)
        lo, hi = self.quantile_ci_us(0.99)
        out: dict[str, float | int | list[float] | None] = {"count": self.count, "min": _ms(self.min_us)}
        out["mean"] = _ms(self.mean_us)
        for pct, value in zip(STANDARD_PERCENTILES, values, strict=True):
            out[percentile_key(pct)] = _ms(value)
        out["max"] = _ms(self.max_us)
        out["p99_ci"] = [_ms(lo), _ms(hi)]
        return out

    def sample_ms(self, limit: int) -> list[float]:
        """At most ``limit`` values (ms, ascending) with this histogram's distribution, for bootstrap comparisons.

        With ``count <= limit``, every recorded value (as :meth:`percentiles_us` reads it); else the middle rank
        of each of ``limit`` equal slices, except that the slices the standard percentiles fall in take exactly
        the histogram's ranks for them. Either way (for ``limit >= 1000``, where those percentiles fall in
        distinct slices) the nearest-rank p50/p90/p95/p99/p99.9, min and max of the sample are the histogram's
        own: a statistic of the stored sample and the summary are one number.
        """
        n = self.count
        k = min(limit, n)
        if k <= 0:
            return []
        if k == n:
            ranks = list(range(1, n + 1))
        else:
            ranks = [((2 * i + 1) * n) // (2 * k) + 1 for i in range(k)]
            for pct in (0.0, *STANDARD_PERCENTILES, 100.0):
                index = nearest_rank(k, pct / 100.0) - 1
                rank = nearest_rank(n, pct / 100.0)
                ranks[index] = rank
                for j in range(index - 1, -1, -1):  # keep the ranks ascending around the one just set
                    if ranks[j] <= rank:
                        break
                    ranks[j] = rank
                for j in range(index + 1, k):
                    if ranks[j] >= rank:
                        break
                    ranks[j] = rank
        return [_ms(v) for v in self.values_at_ranks(ranks)]

    def to_dict(self) -> dict[str, object]:
        """Sparse serialisable form (index -> count) for merging across processes."""
        return {
            "counts": {str(i): c for i, c in enumerate(self.counts) if c},
            "count": self.count,
            "total_us": self.total_us,
            "min_us": self.min_us,
            "max_us": self.max_us,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Histogram:
        """Inverse of :meth:`to_dict`."""
        hist = cls()
        raw = data.get("counts") or {}
        assert isinstance(raw, Mapping)
        top = max((int(k) for k in raw), default=-1)
        if top >= 0:
            hist.counts.frombytes(bytes(8 * (top + 1)))
            for key, value in raw.items():
                hist.counts[int(key)] = int(value)
        hist.count = int(data.get("count", 0))  # type: ignore[call-overload]
        hist.total_us = int(data.get("total_us", 0))  # type: ignore[call-overload]
        hist.min_us = int(data.get("min_us", 0))  # type: ignore[call-overload]
        hist.max_us = int(data.get("max_us", 0))  # type: ignore[call-overload]
        return hist


@functools.cache
def _numpy() -> Any:
    """The numpy module when installed (imported on first use: it costs ~0.1 s), else None."""
    # numpy's OpenBLAS starts a thread per core that spins for ~0.1 s: CPU taken from a load test on a small
    # machine. Nothing here does linear algebra, so one thread; the environment is restored at once, so processes
    # started later (a profiled workload) keep their own setting.
    saved = {name: os.environ.get(name) for name in _BLAS_THREAD_VARIABLES}
    if "numpy" not in sys.modules:
        for name in _BLAS_THREAD_VARIABLES:
            os.environ[name] = "1"
    try:
        import numpy
    except Exception:  # noqa: BLE001 - missing or broken: the pure-Python path counts the same  # pragma: no cover
        return None
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return numpy


_BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


def percentile_key(pct: float) -> str:
    """``p50``, ``p99``, ``p99_9`` for 50, 99, 99.9."""
    text = f"{pct:g}".replace(".", "_")
    return f"p{text}"


def _ms(value_us: float) -> float:
    return round(value_us / 1000.0, 4) if math.isfinite(value_us) else math.nan
