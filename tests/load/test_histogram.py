"""The log-linear histogram: exactness, 3-digit precision, merging, percentiles, CI, bounded memory."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from infradoctor.load.histogram import Histogram, ReservoirSample


def exact_percentile(values: list[int], pct: float) -> int:
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def test_small_values_are_exact() -> None:
    hist = Histogram()
    for v in range(2048):
        hist.record(v)
    assert hist.percentiles_us([50.0])[0] == 1023
    assert hist.values_at_ranks([1, 2, 2048]) == [0, 1, 2047]


@given(st.integers(min_value=0, max_value=(1 << 40)))
def test_bucket_holds_value_within_a_thousandth(value: int) -> None:
    hist = Histogram()
    hist.record(value)
    (reported,) = hist.values_at_ranks([1])
    assert abs(reported - value) <= max(1, value) / 1000.0 * 1.03


@given(st.lists(st.integers(min_value=0, max_value=10_000_000), min_size=1, max_size=300))
@settings(max_examples=60)
def test_percentiles_match_sorted_values_to_three_digits(values: list[int]) -> None:
    hist = Histogram()
    for v in values:
        hist.record(v)
    for pct in (50.0, 90.0, 99.0, 99.9, 100.0):
        got = hist.percentiles_us([pct])[0]
        want = exact_percentile(values, pct)
        assert abs(got - want) <= max(1.0, want * 0.001), (pct, got, want)
    assert hist.max_us == max(values) and hist.min_us == min(values)
    assert hist.count == len(values)


def test_merge_equals_recording_everything_in_one() -> None:
    rng = random.Random(1)
    a, b, both = Histogram(), Histogram(), Histogram()
    for i in range(5000):
        v = int(rng.lognormvariate(9, 1.5))
        (a if i % 3 else b).record(v)
        both.record(v)
    merged = Histogram.merged([a, b])
    assert merged.counts.tolist()[: len(both.counts)] == both.counts.tolist()[: len(merged.counts)]
    assert (merged.count, merged.total_us, merged.min_us, merged.max_us) == (
        both.count,
        both.total_us,
        both.min_us,
        both.max_us,
    )
    assert merged.summary_ms() == both.summary_ms()
    assert Histogram.from_dict(both.to_dict()).summary_ms() == both.summary_ms()


def test_memory_is_bounded_by_the_largest_value_not_the_count() -> None:
    hist = Histogram()
    rng = random.Random(2)
    for _ in range(200_000):
        hist.record(int(rng.uniform(100, 3_600_000_000)))  # up to an hour in us
    assert len(hist.counts) < 26_000
    hist.record(10**20)  # clamped, not grown without bound
    assert len(hist.counts) < 35_000


def test_p99_confidence_interval_brackets_the_estimate_and_narrows_with_n() -> None:
    rng = random.Random(3)
    small, large = Histogram(), Histogram()
    for i in range(100_000):
        v = int(rng.expovariate(1 / 10_000))
        large.record(v)
        if i < 1000:
            small.record(v)
    for hist in (small, large):
        lo, hi = hist.quantile_ci_us(0.99)
        p99 = hist.percentiles_us([99.0])[0]
        assert lo <= p99 <= hi
    # the true p99 of Exp(mean 10 ms) is 46.05 ms; the large sample's interval must contain it
    lo, hi = large.quantile_ci_us(0.99)
    assert lo <= 46_052 <= hi
    width = lambda h: h.quantile_ci_us(0.99)[1] - h.quantile_ci_us(0.99)[0]  # noqa: E731
    assert width(large) < width(small)


def test_summary_of_empty_histogram() -> None:
    assert Histogram().summary_ms() == {"count": 0}
    assert math.isnan(Histogram().mean_us)


def test_reservoir_is_bounded_and_deterministic() -> None:
    a, b = ReservoirSample(100, seed=5), ReservoirSample(100, seed=5)
    for i in range(10_000):
        a.add(float(i))
        b.add(float(i))
    assert len(a.values) == 100 and a.values == b.values and a.seen == 10_000
    assert max(a.values) > 5000  # later values get in


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(0, 50),
    seed=st.integers(0, 2**16),
    batches=st.lists(st.integers(0, 400), max_size=12),
)
def test_reservoir_batches_keep_the_one_by_one_sample(capacity: int, seed: int, batches: list[int]) -> None:
    one, batched = ReservoirSample(capacity, seed), ReservoirSample(capacity, seed)
    converted: list[float] = []

    def convert(value: float) -> float:
        converted.append(value)
        return value / 2

    start = entered = 0
    for size in batches:
        values = [float(v) for v in range(start, start + size)]
        start += size
        for value in values:
            entered += one.seen < capacity or one.seen + 1 == one.next_replace
            one.add(value / 2)
        batched.add_batch(values, convert)
        assert (batched.values, batched.seen, batched.next_replace) == (one.values, one.seen, one.next_replace)
    assert len(converted) == entered  # only the values that enter the sample are converted


def test_reservoir_sample_is_uniform_over_the_stream() -> None:
    sample = ReservoirSample(2000, seed=11)
    n = 200_000
    for i in range(n):
        sample.add(float(i))
    assert len(sample.values) == 2000 and len(set(sample.values)) == 2000
    mean = sum(sample.values) / len(sample.values)
    assert abs(mean / n - 0.5) < 0.03  # standard error of the mean ~0.0065 * n
    quarter = sum(1 for v in sample.values if v < n / 4) / 2000
    assert abs(quarter - 0.25) < 0.04


@given(
    st.lists(
        st.one_of(
            st.floats(min_value=-1.0, max_value=1e7, allow_nan=False),
            st.sampled_from([0.0, 2.047e-3, 2.0475e-3, 2.048e-3, 4.0955e-3, 4.096e-3, 1e12]),
        ),
        min_size=1,
        max_size=400,
    ),
    st.booleans(),
)
@settings(max_examples=80)
def test_batch_of_seconds_counts_what_one_by_one_counts(values: list[float], use_numpy: bool) -> None:
    from array import array

    one, batch = Histogram(), Histogram()
    one.record(123_456)  # histograms that already hold counts
    batch.record(123_456)
    for v in values:
        one.record_seconds(v)
    total, peak = batch.record_seconds_batch(array("d", values), use_numpy=use_numpy)
    width = max(len(one.counts), len(batch.counts))
    assert one.counts.tolist() + [0] * (width - len(one.counts)) == batch.counts.tolist() + [0] * (
        width - len(batch.counts)
    )
    assert (one.count, one.total_us, one.min_us, one.max_us) == (
        batch.count,
        batch.total_us,
        batch.min_us,
        batch.max_us,
    )
    assert total == one.total_us - 123_456
    assert peak == max(min(max(0, int(v * 1e6 + 0.5)), (1 << 42) - 1) for v in values)
