"""A route run whose URLs carry credentials: stored, shown and reported without them, and still rendered.

Redaction once turned ``http://user:pw@host`` into ``http://[REDACTED]@host``, which ``urlsplit`` reads as an IPv6
literal: the terminal view and ``show --format md`` ended in ``render:route: ValueError``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infradoctor.findings import run_rules
from infradoctor.redact import redact
from infradoctor.report import render
from infradoctor.report.present.route import sections
from infradoctor.report.writeup import build_writeup
from infradoctor.report.writeup_render import to_html, to_markdown
from infradoctor.result import Result, new_result
from infradoctor.route.diagnose import RouteOptions, build_metrics
from tests.route.builders import BackendSpec, Scenario, evidence, samples
from tests.route.servers import backends, py_router

SECRETS = ("alice7u", "S3CRETpw", "K3Yq9z", "T0Kq8w")


def _no_secret(text: str, where: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{where}: {leaked}"


def test_hand_built_result_with_credentials_renders_in_every_format() -> None:
    b1 = "http://alice7u:S3CRETpw@10.0.0.1:8000/predict?key=K3Yq9z"
    b2 = "http://10.0.0.2:8000"
    router = "http://alice7u:S3CRETpw@lb.test:8080/predict?token=T0Kq8w"
    sc = Scenario([BackendSpec(b1), BackendSpec(b2, error_rate=0.3)], router_ms=5)
    ev = evidence(sc)
    metrics = build_metrics(ev, samples(sc), RouteOptions(router=router, backends=(b1, b2)))
    raw = new_result("route", started_at="2026-11-29T00:00:00Z", duration_s=1.0, metrics=metrics.to_dict(),
                     findings=run_rules(ev), target={"router": router, "backends": [b1, b2]})
    stored = Result.from_dict(redact(raw.to_dict()))
    _no_secret(stored.to_json(), "stored JSON")
    for fmt in ("terminal", "md", "html", "json"):
        text = render(stored, fmt)
        _no_secret(text, fmt)
        assert "render:route" not in text and "ValueError" not in text, fmt
        if fmt != "json":
            assert "10.0.0.1:8000" in text and "Router or backend?" in text, fmt
    writeup = build_writeup([stored], title="t")
    for text in (to_markdown(writeup), to_html(writeup)):
        _no_secret(text, "report")
        assert "lb.test" in text  # the host survives redaction (Network: requests went to lb.test)


def test_presenters_survive_urls_that_do_not_parse() -> None:
    # runs stored before the fix carry ``http://[REDACTED]@host``; any unparsable URL is shown as written
    sc = Scenario([BackendSpec("http://10.0.0.1:8000"), BackendSpec("http://10.0.0.2:8000")], router_ms=1)
    ev = evidence(sc)
    metrics = build_metrics(ev, samples(sc), RouteOptions(router="http://lb.test/p",
                                                          backends=tuple(b.url for b in sc.backends)))
    text = json.dumps(metrics.to_dict())
    text = text.replace("http://10.0.0.1:8000", "http://[REDACTED]@10.0.0.1:8000")
    text = text.replace("http://10.0.0.2:8000", "http://[bad")
    result = new_result("route", started_at="2026-11-29T00:00:00Z", duration_s=1.0, metrics=json.loads(text),
                        target={"router": "http://[REDACTED]@lb.test/p"})
    titles = [s.title for s in sections(result)]
    assert "Paths (interleaved)" in titles and "Backends" in titles
    for fmt in ("terminal", "md", "html"):
        assert "render:route" not in render(result, fmt), fmt
    summary = "\n".join(build_writeup([result], title="t").method)
    assert "lb.test" in summary


@pytest.mark.integration
def test_route_with_credentials_in_urls_end_to_end(cli, tmp_path: Path, isolated_store: Path,
                                                    result_validator) -> None:
    out = tmp_path / "route.json"
    with backends(tmp_path, [{"latency_ms": 2}]) as bs, py_router(tmp_path, bs) as r:
        backend = f"http://alice7u:S3CRETpw@127.0.0.1:{bs[0].port}/predict?key=K3Yq9z"
        run = cli("route", "--router", f"http://alice7u:S3CRETpw@127.0.0.1:{r.port}/predict?token=T0Kq8w",
                  "--backend", backend, "--duration", "0.5", "--connects", "5", "--json", str(out))
    assert run.exit_code in (0, 1), run.stderr
    _no_secret(run.stdout + run.stderr, "terminal")
    assert "render:route" not in run.stdout and "Router or backend?" in run.stdout
    assert f"127.0.0.1:{bs[0].port}" in run.stdout
    data = json.loads(out.read_text())
    result_validator(data)
    _no_secret(out.read_text(), "--json")
    assert data["metrics"]["paths"][0]["ok"] > 0
    stored = [p for p in isolated_store.rglob("*") if p.is_file()]
    assert stored
    for path in stored:
        _no_secret(path.read_bytes().decode("utf-8", "replace"), str(path))
    for fmt in ("terminal", "md", "html", "json"):
        shown = cli("show", data["run_id"], "--format", fmt)
        assert shown.exit_code == 0, shown.stderr
        _no_secret(shown.stdout + shown.stderr, fmt)
        assert "render:route" not in shown.stdout and "ValueError" not in shown.stdout, fmt
        if fmt != "json":
            assert f"127.0.0.1:{bs[0].port}" in shown.stdout, fmt
    for fmt in ("md", "html"):
        report = cli("report", data["run_id"], "--format", fmt)
        assert report.exit_code == 0, report.stderr
        _no_secret(report.stdout + report.stderr, f"report {fmt}")
        assert "127.0.0.1" in report.stdout
