"""Analysis numbers, the metrics layout, evidence round-trip, and the sections every renderer shows."""

from __future__ import annotations

import json

import pytest

from infradoctor.profile.analyze import analyze, build_metrics, subsample, warmup_count
from infradoctor.profile.evidence import ProfileEvidence, SystemSample
from infradoctor.profile.result import build_result
from infradoctor.report import FORMATS, render
from infradoctor.report.present.profile import sections
from infradoctor.stats import percentile

from .builders import evidence, loader, steps


def starving():
    return evidence(steps=steps(100, first=0.2, data_wait_s=0.006, forward_s=0.002, backward_s=0.001),
                    dataloaders=(loader(wait_s=0.6),), fetch={"calls": 100, "items": 3200, "time_s": 0.58})


def test_warmup_and_percentiles() -> None:
    assert [warmup_count(n) for n in (0, 2, 3, 30, 100, 10000)] == [0, 0, 1, 3, 5, 5]
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([], 50) is None
    assert percentile([0.0, 10.0], 90) == 10.0  # nearest rank, the one quantile definition
    many = subsample([float(i) for i in range(12000)])
    assert len(many) == 5000 and many[:2] == [0.0, 2.0]


def test_analysis_of_steady_steps() -> None:
    analysis = analyze(starving())
    assert len(analysis.warmup) == 5 and len(analysis.steady) == 95
    assert analysis.fraction("data_wait") == pytest.approx(0.6)
    assert analysis.fraction("other") == pytest.approx(0.1)
    assert analysis.samples_per_s == pytest.approx(3200)
    assert analysis.memory is not None and analysis.memory.slope_bytes_per_step == 0


def test_metrics_layout_and_headline() -> None:
    metrics = build_metrics(analyze(starving())).to_dict()
    for key in ("workload", "headline", "steps", "throughput", "memory", "model", "syncs", "dataloader", "system",
                "distributions"):
        assert key in metrics
    headline = metrics["headline"]
    assert headline["data_wait_fraction"] == pytest.approx(0.6)
    assert headline["step_time_ms_p50"] == pytest.approx(10.0)
    assert headline["samples_per_s"] == pytest.approx(3200)
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in headline.values())
    assert metrics["steps"]["step_time_ms"]["first"] == pytest.approx(200)
    assert metrics["dataloader"]["item_time_ms"] == pytest.approx(0.58 / 3200 * 1000, rel=1e-3)
    assert metrics["system"]["cpu_percent_per_core"] == [50.0, 60.0]
    assert len(metrics["distributions"]["step_time_ms"]) == 95
    json.dumps(metrics)


def test_headline_without_steps_leaves_out_what_is_not_available() -> None:
    server_idle = evidence(steps=(), step_mode=None, modules=(), main_module=None, backward_calls=0,
                           optimizer_steps=0, dataloaders=(), peak_rss_bytes=400_000_000)
    assert build_metrics(analyze(server_idle)).to_dict()["headline"] == {"steps": 0, "peak_rss_mb": 400.0}


def test_headline_gpu_utilisation_is_a_percent_on_gpu() -> None:
    samples = tuple(SystemSample(t=100.0 + 0.2 * i, cpu_percent=(50.0,), process_cpu_percent=99.0,
                                 rss_bytes=300_000_000, gpu_util_percent=(40.0, 60.0)) for i in range(5))
    metrics = build_metrics(analyze(evidence(cuda=True, system=samples)))
    assert metrics.headline.gpu_util_mean_pct == pytest.approx(50.0)
    assert metrics.system.gpu_util_mean_pct == pytest.approx(50.0)
    assert "cuda_peak_mb" not in metrics.to_dict()["headline"]  # no allocator reading: left out, not null


def test_evidence_round_trips_through_json() -> None:
    ev = starving()
    again = ProfileEvidence.from_dict(json.loads(json.dumps(ev.to_dict())))
    assert again == ev


def test_sections_show_breakdown_bar_and_tables(result_validator) -> None:
    result = build_result(starving(), started_at="2026-11-29T10:00:00Z")
    result_validator(result)
    built = sections(result)
    bar = built[0].bars[0]
    labels = dict(bar.parts)
    assert labels["data wait"] == pytest.approx(6.0) and labels["forward"] == pytest.approx(2.0)
    assert any(s.title == "DataLoader" for s in built)
    for fmt in FORMATS:
        text = render(result, fmt)
        assert "P001" in text
        if fmt != "json":
            assert "data wait" in text and "Where the time goes" in text


def test_sections_of_a_cpu_only_profile() -> None:
    result = build_result(evidence(torch_imported=False, steps=(), modules=(), dataloaders=(), main_module=None),
                          started_at="2026-11-29T10:00:00Z")
    built = sections(result)
    assert built[0].bars == []
    assert any("never imported torch" in line for line in built[0].lines)


def test_long_runs_keep_a_bounded_representative_sample_of_steps(tmp_path) -> None:
    from infradoctor.profile.evidence import _read_steps

    path = tmp_path / "1.steps.jsonl"
    rows = [{"i": i, "t0": float(i), "t1": i + 0.5, "data_wait": 0.25, "forward": 0.25, "samples": 8}
            for i in range(1000)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"i": 1000, "t0"', encoding="utf-8")
    kept = _read_steps(path, limit=100)
    assert 50 <= len(kept) <= 100
    assert kept[0].index == 0 and kept[-1].index >= 900
    ev = evidence(steps=tuple(kept))
    metrics = build_metrics(analyze(ev))
    assert metrics.steps.count == kept[-1].index + 1
    assert metrics.steps.phase_fraction.data_wait == pytest.approx(0.5)


def test_a_run_too_short_for_system_samples_still_builds_metrics() -> None:
    from infradoctor.findings import run_rules

    ev = evidence(system=(), cpu_count=8, steps=steps(50, data_wait_s=0.008, forward_s=0.001),
                  dataloaders=(loader(wait_s=0.4),))
    metrics = build_metrics(analyze(ev))
    assert metrics.system.cpu_percent_per_core == () and metrics.system.cores == 8
    p001 = next(f for f in run_rules(analyze(ev)) if f.code == "P001")
    assert "num_workers=7 (now 0; this machine has 8 cores)" in p001.fix  # one core stays with the loop
