"""The log-linear histogram: exactness, 3-digit precision, merging, percentiles, CI, bounded memory."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from infradoctor.load.histogram import STANDARD_PERCENTILES, Histogram
from infradoctor.stats import quantile


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


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(st.integers(min_value=0, max_value=5_000_000_000), min_size=1, max_size=2500),
    limit=st.integers(1000, 1400),
)
def test_stored_sample_has_the_histograms_own_percentiles(values: list[int], limit: int) -> None:
    """The distribution a result stores (for comparisons) gives the summary's p50 ... p99.9, min and max exactly:
    one number per metric, whichever of the two a reader takes it from."""
    hist = Histogram()
    for v in values:
        hist.record(v)
    sample = hist.sample_ms(limit)
    assert len(sample) == min(limit, len(values)) and sample == sorted(sample)
    summary = hist.summary_ms()
    for pct in STANDARD_PERCENTILES:
        key = f"p{pct:g}".replace(".", "_")
        assert quantile(sample, pct / 100.0) == summary[key], (pct, key)
    assert (sample[0], sample[-1]) == (summary["min"], summary["max"])


def test_stored_sample_keeps_every_value_while_it_fits() -> None:
    hist = Histogram()
    for v in (5, 1, 3_000_000, 2_500, 7):
        hist.record(v)
    assert hist.sample_ms(5000) == [0.001, 0.005, 0.007, 2.5005, 3000.0]  # (2.5 ms: its bucket's middle)
    assert hist.sample_ms(0) == [] and Histogram().sample_ms(10) == []


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
