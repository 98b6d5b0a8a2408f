"""Numbers and details as every renderer shows them: p-values, plain numbers, risks that say nothing."""

from __future__ import annotations

import re

import pytest

from infradoctor.findings import make_finding
from infradoctor.report.html import HtmlRenderer
from infradoctor.report.markdown import MarkdownRenderer
from infradoctor.report.sections import finding_details, format_evidence, format_p_value, format_value
from infradoctor.report.terminal import TerminalRenderer
from infradoctor.result import new_result

RENDERERS = (TerminalRenderer(width=100), MarkdownRenderer(), HtmlRenderer())


@pytest.mark.parametrize(("p", "shown"), [
    (1e-12, "p<0.001"), (0.0, "p<0.001"), (0.0009, "p<0.001"), (0.001, "p=0.001"), (0.0123, "p=0.012"),
    (0.5, "p=0.5"), (1.0, "p=1"), (None, "p=–"), (float("nan"), "p=–"),
])
def test_p_values_never_read_p_equals_zero(p: float | None, shown: str) -> None:
    assert format_p_value(p) == shown


def test_format_value_never_uses_scientific_notation() -> None:
    exponent = re.compile(r"\de[+-]?\d|inf|nan", re.IGNORECASE)
    for power in range(-15, 16):
        for mantissa in (1.0, 2.5, 5.3, 9.99):
            for sign in (1, -1):
                value = sign * mantissa * 10.0**power
                for signed in (False, True):
                    text = format_value(value, signed=signed)
                    assert not exponent.search(text), (value, text)
                    assert text in ("0", "–") or float(text.replace(",", "")) == pytest.approx(value, rel=0.06)
    assert format_value(12_345_678) == "12,345,678" and format_value(5.3e-3) == "0.0053"
    assert format_value(2.52e3) == "2,520" and format_value(float("inf")) == "–"


def test_p_values_in_evidence_and_in_the_route_section() -> None:
    assert format_evidence({"p_value": 3e-14, "error_rate": 0.3}) == "p_value<0.001, error_rate=0.3"
    assert format_evidence({"p_value": 0.04}) == "p_value=0.04"

    from infradoctor.findings import run_rules
    from infradoctor.report.present.route import sections
    from infradoctor.route.diagnose import RouteOptions, build_metrics
    from tests.route.builders import B1, B2, BackendSpec, Scenario, evidence, samples

    sc = Scenario([BackendSpec(B1), BackendSpec(B2)], router_ms=5)
    ev = evidence(sc)
    metrics = build_metrics(ev, samples(sc), RouteOptions(router="http://lb.test:8080/predict", backends=(B1, B2)))
    assert metrics.attribution.p_value is not None and metrics.attribution.p_value < 1e-6  # a clear difference
    result = new_result("route", started_at="2026-11-29T00:00:00Z", duration_s=1.0, metrics=metrics.to_dict(),
                        findings=run_rules(ev))
    lines = " ".join(line for s in sections(result) for line in s.lines)
    assert "Mann-Whitney p<0.001" in lines
    for renderer in RENDERERS:
        text = renderer.render([result])
        assert not re.search(r"p=0(?![.\d])", text), type(renderer).__name__  # a rounded-away p-value


@pytest.mark.parametrize("risk", ["None.", "none", "N/A", "", "  None  "])
def test_a_risk_that_says_nothing_is_left_out(risk: str) -> None:
    finding = make_finding("S008", "knee at concurrency 4", {"level": 4}, risk=risk)
    assert [label for label, _ in finding_details(finding)] == ["Evidence", "Fix"]
    result = new_result("load", started_at="2026-11-29T00:00:00Z", duration_s=1.0, findings=[finding])
    for renderer in RENDERERS:
        text = renderer.render([result])
        assert not re.search(r"risk\W*(</i>)?\W*none", text, re.IGNORECASE), type(renderer).__name__
    stated = make_finding("S008", "knee", {"level": 4}, risk="Little headroom for bursts.")
    assert ("Risk", "Little headroom for bursts.") in finding_details(stated)
