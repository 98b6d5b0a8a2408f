from __future__ import annotations

import json
from pathlib import Path

import pytest

from infradoctor.cli.base import parse_headers
from infradoctor.errors import UsageError
from infradoctor.route.diagnose import backend_request_url, parse_weights
from tests.route.servers import backends, nginx_config
from tests.support.servers import nginx


@pytest.mark.parametrize(
    "args",
    [
        ["--router", "ftp://x/", "--backend", "http://127.0.0.1:1"],
        ["--router", "http://127.0.0.1:1/", "--backend", "http://127.0.0.1:1", "--weights", "1,2"],
        ["--router", "http://127.0.0.1:1/", "--backend", "http://127.0.0.1:1", "--weights", "a"],
        ["--router", "http://127.0.0.1:1/", "--backend", "http://127.0.0.1:1", "--backend", "http://127.0.0.1:1"],
        ["--router", "http://127.0.0.1:1/", "--backend", "http://127.0.0.1:1", "--concurrency", "0"],
        ["--router", "http://127.0.0.1:1/", "--backend", "http://127.0.0.1:1", "-H", "no colon"],
        ["--router", "http://127.0.0.1:1/", "--backend", "http://127.0.0.1:1", "--body", "/nonexistent/body"],
        ["--router", "http://127.0.0.1:1/"],
    ],
)
def test_bad_input_is_a_usage_error_without_traceback(cli, args: list[str]) -> None:
    run = cli("route", *args, "--no-store")
    assert run.exit_code == 2
    assert "Traceback" not in run.stderr


def test_help_and_rule_docs(cli) -> None:
    run = cli("route", "--help")
    assert run.exit_code == 0 and "--backend-header" in run.stdout and "interleaved" in run.stdout
    for code in ("R001", "R003", "R004", "R005", "R008", "R009", "R010", "R011", "R013"):
        doc = cli("rules", code)
        assert doc.exit_code == 0 and "How it is measured" in doc.stdout, code
    assert "--router-stats" in run.stdout and "--server-metrics" in run.stdout
    for code in ("R012",):  # route does not measure deadlines: only logs emits them
        first = cli("rules", code).stdout.splitlines()[0]
        assert first.endswith(", emitted by logs)"), first


def test_backend_url_gets_the_router_path() -> None:
    assert backend_request_url("http://lb:80/v1/x?a=1", "http://10.0.0.1:8000") == "http://10.0.0.1:8000/v1/x?a=1"
    assert backend_request_url("http://lb:80/v1/x", "http://10.0.0.1:8000/other") == "http://10.0.0.1:8000/other"
    assert parse_weights("3,1", 2) == (3.0, 1.0) and parse_weights(None, 2) is None
    assert parse_headers(["Authorization: Bearer x:y"], "--header") == {"Authorization": "Bearer x:y"}
    with pytest.raises(UsageError):
        parse_weights("1", 2)


@pytest.mark.integration
def test_post_body_stored_run_and_renderers(cli, tmp_path: Path, result_validator) -> None:
    body = tmp_path / "req.json"
    body.write_text('{"inputs": [1, 2, 3]}')
    with backends(tmp_path, [{"latency_ms": 2}]) as bs, nginx(nginx_config(bs), tmp_path) as r:
        run = cli("route", "--router", r.url + "/predict", "--backend", bs[0].url, "--body", str(body),
                  "--duration", "0.5", "--connects", "5", "--json", "-", "--label", "baseline", "--iperf")
    assert run.exit_code == 0, run.stderr
    data = json.loads(run.stdout)
    result_validator(data)
    assert data["target"]["method"] == "POST" and data["label"] == "baseline"
    assert data["metrics"]["paths"][0]["ok"] > 0
    assert "Router or backend?" in run.stderr and "Paths (interleaved)" in run.stderr
    assert len(data["metrics"]["distributions"]["routed_latency_ms"]) == data["metrics"]["paths"][0]["ok"]
    assert data["metrics"]["network"]["bandwidth"][0]["mbits_per_s"] is None  # no iperf3 server here
    assert data["metrics"]["network"]["bandwidth"][0]["reason"]
    assert data["metrics"]["network"]["connect"][0]["keep_alive"] is True
    for fmt in ("md", "html"):
        shown = cli("show", data["run_id"], "--format", fmt)
        assert shown.exit_code == 0 and "Router or backend?" in shown.stdout and "Backends" in shown.stdout, fmt


@pytest.mark.integration
def test_ctrl_c_ends_early_with_a_partial_result(tmp_path: Path, result_validator) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from infradoctor.route.network import read_counter

    out = tmp_path / "partial.json"
    with backends(tmp_path, [{"latency_ms": 2}]) as bs, nginx(nginx_config(bs), tmp_path) as r:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path("src").resolve()), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.Popen(
            [sys.executable, "-m", "infradoctor", "route", "--router", r.url + "/predict", "--backend", bs[0].url,
             "--duration", "60", "--connects", "5", "--json", str(out), "--quiet", "--no-store"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        # interrupt once routed requests reach the backend (not at a fixed time: startup is slow on a busy machine)
        while (read_counter(bs[0].url, "/stats") or 0) < 20 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, proc.stderr.read() if proc.stderr else ""  # interrupted; partial result written
    data = json.loads(out.read_text())
    result_validator(data)
    assert any(e["source"] == "route.interrupted" for e in data["errors"])
    assert data["metrics"]["plan"]["measured_s"] < 30 and data["metrics"]["paths"][0]["ok"] > 0


def test_direct_concurrency_defaults_to_the_routed_share_of_one_backend() -> None:
    from infradoctor.route.diagnose import RouteOptions, direct_concurrency_for

    three = ("http://a:1", "http://b:1", "http://c:1")
    assert direct_concurrency_for(RouteOptions("http://lb/", three, concurrency=8)) == 3
    assert direct_concurrency_for(RouteOptions("http://lb/", three[:1], concurrency=8)) == 8
    assert direct_concurrency_for(RouteOptions("http://lb/", three, concurrency=1)) == 1
    assert direct_concurrency_for(RouteOptions("http://lb/", three, concurrency=8, direct_concurrency=8)) == 8


@pytest.mark.integration
def test_route_says_what_it_is_doing_while_it_works(tmp_path: Path) -> None:
    """Issue 18: route (about 13 s by default) printed nothing while it worked; now a line per phase on stderr."""
    import subprocess
    import sys

    with backends(tmp_path, [{"latency_ms": 2}]) as bs, nginx(nginx_config(bs), tmp_path) as r:
        proc = subprocess.run([sys.executable, "-m", "infradoctor", "route", "--router", r.url + "/predict",
                               "--backend", bs[0].url, "--duration", "1", "--connects", "2", "--no-store"],
                              capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    for phase in ("route: connect probes", "route: routed vs direct", "route: health checks"):
        assert phase in proc.stderr, proc.stderr
