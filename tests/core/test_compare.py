import random

from infradoctor.compare import compare_results, lower_is_better
from infradoctor.compare.analysis import compare_changes
from infradoctor.findings import make_finding
from infradoctor.result import new_result
from infradoctor.stats import bootstrap_differences, mean, quantile, quantile_ranks
from infradoctor.store import RunStore


def run(latencies: list[float], rps: float, label: str, findings=()):
    return new_result(
        "load",
        started_at="2026-11-29T10:00:00Z",
        duration_s=5,
        target={"url": "http://127.0.0.1:1/x"},
        metrics={"headline": {"throughput_rps": rps, "p99_ms": quantile(sorted(latencies), 0.99)},
                 "distributions": {"latency_ms": latencies}},
        findings=list(findings),
    ).with_(label=label)


def samples(seed: int, centre: float, n: int = 800) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(centre, centre * 0.1) for _ in range(n)]


def test_quantile_is_nearest_rank() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert quantile(values, 0.5) == 2.0
    assert quantile(values, 0.0) == 1.0 and quantile(values, 1.0) == 4.0
    assert mean(values) == 2.5
    lo, hi = quantile_ranks(1000, 0.99)
    assert lo < 990 < hi <= 1000


def test_bootstrap_detects_real_change_and_not_noise() -> None:
    diff, low, high = bootstrap_differences(samples(2, 50), samples(1, 100), ["mean"], resamples=200)["mean"]
    assert -55 < diff < -45 and high < 0  # after - before
    same = samples(3, 100)
    diff, low, high = bootstrap_differences(list(reversed(same)), same, ["mean"], resamples=200)["mean"]
    assert abs(diff) < 1e-9 and low < 0 < high


def test_compare_calls_out_improvements_and_regressions() -> None:
    before = run(samples(1, 100), 50.0, "baseline", [make_finding("S001", "serialized")])
    after = run(samples(2, 50), 100.0, "after")
    result = compare_results(before, after, resamples=200)
    rows = {(r["metric"], r["statistic"]): r for r in result.metrics["changes"]}
    assert rows[("latency_ms", "mean")]["improved"] and rows[("latency_ms", "mean")]["significant"]
    throughput = rows[("throughput_rps", "value")]
    assert throughput["direction"] == "better" and not throughput["improved"]  # one value per run: no CI
    assert ("p99_ms", "value") not in rows  # the latency distribution's own row covers it
    assert result.metrics["findings_gone"] == [{"code": "S001", "reason": ""}]
    assert result.metrics["headline"]["regressions"] == 0
    worse = compare_results(after, before, resamples=200)
    assert worse.metrics["headline"]["regressions"] >= 2


def test_same_distribution_is_within_noise() -> None:
    same = samples(5, 80)
    rows = compare_changes(run(same, 10, "a"), run(same[::-1], 10, "b"), resamples=200)
    dist = [r for r in rows if r.source == "distribution"]
    assert dist and not any(r.regression or r.improved for r in dist)


def test_direction_from_names() -> None:
    assert lower_is_better("p99_ms") is True
    assert lower_is_better("throughput_rps") is False
    assert lower_is_better("samples_per_s") is False
    assert lower_is_better("data_wait_fraction") is True
    assert lower_is_better("gpus") is None


def test_compare_cli(cli, isolated_store) -> None:
    store = RunStore(isolated_store)
    store.save(run(samples(1, 100), 50.0, "baseline"))
    store.save(run(samples(2, 50), 100.0, "after"))
    out = cli("compare", "baseline", "after", "--resamples", "100")
    assert out.exit_code == 0, out.stderr
    assert "latency_ms" in out.stdout and "better" in out.stdout
    regress = cli("compare", "after", "baseline", "--resamples", "100", "--fail-on-regression")
    assert regress.exit_code == 1 and "REGRESSION" in regress.stdout
    md = cli("compare", "baseline", "after", "--format", "md", "--resamples", "100")
    assert "| latency_ms |" in md.stdout


def test_headline_only_changes_are_never_regressions() -> None:
    before = run(samples(1, 100), 100.0, "a")
    after = run(samples(1, 100), 80.0, "b")  # same latencies, 20% lower throughput: no CI for a single value
    result = compare_results(before, after, resamples=100)
    rows = {(r["metric"], r["statistic"]): r for r in result.metrics["changes"]}
    assert rows[("throughput_rps", "value")]["direction"] == "worse"
    assert result.metrics["headline"]["regressions"] == 0


def test_warnings_for_runs_that_measure_different_things() -> None:
    before = run(samples(1, 100), 100.0, "a")
    after = run(samples(2, 100), 100.0, "b").with_(command="profile", exit_status=1)
    warnings = compare_results(before, after, resamples=100).metrics["warnings"]
    assert any("different commands" in w for w in warnings)
    assert any("exited with status 1" in w for w in warnings)


def test_changes_without_an_interval_are_counted_apart_and_small_ones_not_judged() -> None:
    before = run(samples(1, 100), 100.0, "a")
    before = before.with_(metrics={**before.metrics, "headline": {**before.metrics["headline"], "peak_rss_mb": 340.0}})
    after = run(samples(2, 50), 3202.0, "b")
    after = after.with_(metrics={**after.metrics, "headline": {**after.metrics["headline"], "peak_rss_mb": 344.8}})
    result = compare_results(before, after, resamples=100)
    rows = {(r["metric"], r["statistic"]): r for r in result.metrics["changes"]}
    assert rows[("throughput_rps", "value")]["verdict"] == "better, no interval"  # +3102%: a fact, not a noise claim
    assert rows[("peak_rss_mb", "value")]["verdict"] == "about the same, no interval"  # +1.4% is not "worse"
    head = result.metrics["headline"]
    assert head["improvements"] == 3 and head["not_judged"] == 2 and "unchanged" not in head  # mean, p50, p99
    assert result.target["description"] == "a (load) compared with b (load)"


def test_an_interval_needs_enough_samples() -> None:
    result = compare_results(run(samples(1, 100, n=15), 10, "a"), run(samples(2, 50, n=15), 10, "b"), resamples=100)
    mean_row = next(r for r in result.metrics["changes"] if r["statistic"] == "mean")
    assert mean_row["significant"] is None and mean_row["verdict"] == "too few samples (n=15)"
    assert mean_row["n_before"] == 15 and result.metrics["headline"]["improvements"] == 0


def test_an_interrupted_run_is_never_compared_as_if_complete() -> None:
    from infradoctor.result import ErrorNote

    before = run(samples(1, 1), 10, "a").with_(errors=(ErrorNote("profile.interrupted", "Ctrl-C"),))
    result = compare_results(before, run(samples(2, 20), 10, "b"), resamples=100)
    assert not any(r["regression"] or r["improved"] for r in result.metrics["changes"])
    assert all(r["verdict"].startswith("not judged") for r in result.metrics["changes"])
    assert any("interrupted" in w for w in result.metrics["warnings"])


def test_the_title_is_a_sentence_in_every_renderer() -> None:
    from infradoctor.report.html import HtmlRenderer
    from infradoctor.report.markdown import MarkdownRenderer
    from infradoctor.report.terminal import TerminalRenderer

    before = run(samples(1, 100), 10, "train-baseline").with_(command="profile", run_id="20261129-100000-aaaa")
    after = run(samples(2, 50), 20, "train-after").with_(command="profile", run_id="20261129-100500-bbbb")
    result = compare_results(before, after, resamples=100)
    title = "train-baseline (profile) compared with train-after (profile)"
    assert result.target["description"] == title
    for renderer in (TerminalRenderer(width=120), MarkdownRenderer(), HtmlRenderer()):
        text = renderer.render([result])
        assert title in text, type(renderer).__name__
        assert "{" not in text.split(title)[0].splitlines()[-1]  # not a raw dict beside it
    unlabelled = compare_results(before.with_(label=None), after.with_(label=None, run_id=None), resamples=100)
    assert unlabelled.target["description"] == (
        "run 20261129-100000-aaaa (profile) compared with an unlabelled profile run")
