import random
from html.parser import HTMLParser

from infradoctor.findings import Location, make_finding
from infradoctor.report.writeup import build_writeup, pair_runs
from infradoctor.report.writeup_render import SECTIONS, to_html, to_markdown
from infradoctor.result import new_result
from infradoctor.store import RunStore

HOSTILE = "<script>alert(1)</script>"


def load_run(label: str, centre: float, rps: float, started: str, findings=(), note=None):
    rng = random.Random(label)
    latencies = [rng.gauss(centre, centre * 0.1) for _ in range(600)]
    points = [{"concurrency": c, "throughput_rps": rps * min(c, 4) / 4,
               "latency_ms": {"p50": centre * (1 + c / 8), "p99": centre * (1.5 + c / 4)}} for c in (1, 2, 4, 8)]
    return new_result(
        "load",
        started_at=started,
        duration_s=10.0,
        target={"url": f"http://127.0.0.1:8000/predict?q={HOSTILE}"},
        metrics={"headline": {"throughput_rps": rps, "p99_ms": centre * 1.3},
                 "distributions": {"latency_ms": latencies}, "points": points},
        findings=list(findings),
        environment={"hostname": "box", "os": "Linux", "cpu_count": 2, "python": "3.11", "libraries": {"torch": "2.13.0"}},
    ).with_(label=label, note=note)


def runs():
    before = load_run("serve-baseline", 200.0, 20.0, "2026-11-29T10:00:00Z", [
        make_finding("S001", "requests served one at a time", {"throughput_ratio_c8_c1": 1.02},
                     location=Location("app.py", 17)),
        make_finding("P006", f"model loaded on every request {HOSTILE}", {"loads": 40}, location=Location("app.py", 12)),
    ])
    after = load_run("serve-after", 40.0, 95.0, "2026-11-29T10:05:00Z",
                     [make_finding("S008", "knee at concurrency 4", {"concurrency": 4})],
                     note="load the model once at start-up and run inference in a thread pool")
    return [before, after]


def test_pairs_by_label_prefix() -> None:
    pairs, unpaired = pair_runs(runs(), resamples=100)
    assert len(pairs) == 1 and not unpaired
    assert pairs[0].scenario == "serve"


def test_writeup_has_every_section_and_before_after_numbers() -> None:
    writeup = build_writeup(runs(), resamples=100)
    md = to_markdown(writeup)
    for section in SECTIONS:
        assert f"## {section}" in md
    assert "->" in md and "throughput_rps" in md
    assert "load the model once" in md
    assert "S001" in md and "app.py:17" in md
    assert "S008" in md  # remaining opportunity -> next steps
    assert "Threads share the GIL" in md  # the applied fix's risk from the catalog
    assert "<script>" not in md


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []
        self.ids = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.ids += [v for k, v in attrs if k == "id"]


def test_html_report_is_self_contained_with_charts_and_escaped() -> None:
    page = to_html(build_writeup(runs(), resamples=100))
    assert "<script>" not in page
    parser = Tags()
    parser.feed(page)
    assert "svg" in parser.tags and "polyline" in parser.tags
    for section_id in ("summary", "method", "findings", "changes", "risks", "next-steps"):
        assert section_id in parser.ids
    assert "src=" not in page and "<link" not in page


def test_report_cli(cli, isolated_store, tmp_path) -> None:
    store = RunStore(isolated_store)
    for r in runs():
        store.save(r)
    out = cli("report")
    assert out.exit_code == 0, out.stderr
    assert "## Summary" in out.stdout
    html_path = tmp_path / "r.html"
    assert cli("report", "-o", str(html_path)).exit_code == 0
    assert html_path.read_text().startswith("<!DOCTYPE html>")
    assert cli("report", "--label", "nope").exit_code == 2


def test_failed_after_run_is_not_claimed_as_a_fix() -> None:
    before, after = runs()
    crashed = after.with_(exit_status=1)
    writeup = build_writeup([before, crashed], resamples=100)
    text = "\n".join(writeup.summary)
    assert "NOT confirmed" in text and "exited with status 1" in text
    assert "none above the detection thresholds" not in text


def test_damaged_run_is_skipped_and_named(cli, isolated_store) -> None:
    store = RunStore(isolated_store)
    saved = [store.save(r) for r in runs()]
    (store.runs_dir / f"{saved[0].run_id}.json").write_text("{ not json")
    out = cli("report")
    assert out.exit_code == 0, out.stderr
    assert "Not used (unreadable)" in out.stdout and "skipped" in out.stderr


def test_network_assumption_comes_from_the_target() -> None:
    text = "\n".join(build_writeup(runs(), resamples=100).method)
    assert "over loopback" in text


def test_writeup_claims_only_what_the_runs_show() -> None:
    before, after = runs()
    before = before.with_(findings=(*before.findings, make_finding("S003", "no backpressure past the knee")))
    after = after.with_(metrics={**after.metrics, "knee": None})  # the after sweep never reached a knee
    writeup = build_writeup([before, after], resamples=100)
    md = to_markdown(writeup)
    assert "applied fix" not in md
    assert "no longer found after the change: P006, S001" in md
    assert "not because of a fix: S003: the after sweep found no knee" in md
    assert not any(r.startswith("S003") and "no longer found" in r for r in writeup.risks)
    assert writeup.summary[0].startswith("Investigated serve: the HTTP endpoint http://127.0.0.1:8000/predict")


def test_an_interrupted_after_run_is_not_compared() -> None:
    from infradoctor.result import ErrorNote

    before, after = runs()
    after = after.with_(errors=(ErrorNote("load.interrupted", "Ctrl-C after 2 of 4 points"),))
    writeup = build_writeup([before, after], resamples=100)
    md = to_markdown(writeup)
    assert "NOT confirmed: the after run was interrupted" in md and "not compared: the after run" in md
    assert "REGRESSION" not in md and "->" not in "\n".join(writeup.changes)


def test_router_and_server_state_is_drawn_under_the_latency_curve() -> None:
    from infradoctor.report.charts import all_charts, server_state_vs_load

    before, after = runs()
    points = []
    for c, waiting, kv in ((1, 0, 0.1), (4, 3, 0.5), (16, 14, 0.98)):
        telemetry = {"servers": [{"source": "http://m/metrics", "kind": "vllm", "reads": 4, "waiting_max": waiting,
                                  "running_mean": min(c, 4), "kv_cache_usage_max": kv, "preemptions": 0}],
                     "routers": [{"source": "http://r", "kind": "envoy", "reads": 4, "failed_reads": 0,
                                  "counters": {"retries": c}, "gauges": {"pending_active": {"max": waiting,
                                                                                            "mean": 1, "last": 0}}}]}
        points.append({"concurrency": c, "throughput_rps": 10.0 * c, "latency_ms": {"p50": 10.0 * c, "p99": 20.0 * c},
                       "observations": {"telemetry": telemetry}})
    run = after.with_(metrics={**after.metrics, "points": points})
    svg = server_state_vs_load([run])
    for legend in ("waiting (max)", "KV cache % (max)", "router pending (max)", "router retries"):
        assert legend in svg
    assert svg.count("<polyline") >= 4
    charts = all_charts([before, run])
    assert charts[0].startswith("<svg") and "Latency vs load" in charts[0] and "model-server state" in charts[1]
