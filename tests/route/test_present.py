from __future__ import annotations

from infradoctor.findings import run_rules
from infradoctor.report.markdown import MarkdownRenderer
from infradoctor.report.present.route import sections
from infradoctor.result import new_result
from infradoctor.route.diagnose import RouteOptions, build_metrics
from tests.route.builders import B1, B2, BackendSpec, Scenario, evidence, samples


def test_sections_from_hand_built_evidence_and_from_nothing() -> None:
    sc = Scenario([BackendSpec(B1), BackendSpec(B2, error_rate=0.3)], router_ms=5)
    ev = evidence(sc)
    metrics = build_metrics(ev, samples(sc), RouteOptions(router="http://lb.test:8080/predict", backends=(B1, B2)))
    result = new_result("route", started_at="2026-11-29T00:00:00Z", duration_s=1.0, metrics=metrics.to_dict(),
                        findings=run_rules(ev))
    titles = [s.title for s in sections(result)]
    assert titles == ["Paths (interleaved)", "Router or backend?", "Backends"]  # no connect probes, no Network
    text = MarkdownRenderer().render([result])
    assert "10.0.0.2:8000" in text and "R003" in text
    assert metrics.headline.requests == 900
    assert sections(new_result("route", started_at="2026-11-29T00:00:00Z", duration_s=0.0)) == []
