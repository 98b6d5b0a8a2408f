"""``profile --load-url``: real uvicorn + FastAPI servers with real PyTorch models (CPU), under the profiler and
the load engine, diagnosed as one service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infradoctor.procs import free_port, port_open
from infradoctor.profile.rules import RuleOptions
from infradoctor.profile_load.run import ServiceLoadOptions, profile_service
from infradoctor.result import Result
from tests.serve import apps

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def run_server(tmp_path: Path, script: str, levels: list[int], *, duration: float = 1.5,
               name: str = "server") -> tuple[Result, Path]:
    path = tmp_path / f"{name}.py"
    path.write_text(script)
    port = free_port()
    options = ServiceLoadOptions(load_url=f"http://127.0.0.1:{port}/predict", concurrency=levels,
                                 point_duration_s=duration, timeout_s=20.0, ready_timeout_s=90.0)
    result = profile_service([sys.executable, str(path), str(port)], options, rule_options=RuleOptions(cwd=str(tmp_path)))
    assert not port_open("127.0.0.1", port), "the server was not stopped"
    return result, path


def codes(result: Result) -> set[str]:
    return {f.code for f in result.findings}


def finding(result: Result, code: str) -> Any:
    return next(f for f in result.findings if f.code == code)


def test_model_loaded_per_request_is_p006_at_the_handler_line(tmp_path: Path, cli: Callable,
                                                               result_validator: Callable,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "per_request.py"
    script.write_text(apps.MODEL_PER_REQUEST)
    body = tmp_path / "request.json"
    body.write_text(json.dumps({"x": [0.5] * 64}))
    port = free_port()
    monkeypatch.chdir(tmp_path)
    run = cli("profile", "--load-url", f"http://127.0.0.1:{port}/predict", "--load-body", str(body),
              "--concurrency", "1", "--point-duration", "1", "--json", "out.json", "--",
              sys.executable, script.name, str(port))
    assert run.exit_code == 0, run.stderr
    data = json.loads((tmp_path / "out.json").read_text())
    result_validator(data)
    p006 = next(f for f in data["findings"] if f["code"] == "P006")
    assert p006["location"] == {"file": script.name, "line": apps.marked_line(script, "LOAD-LINE")}
    [point] = data["metrics"]["load"]["points"]
    assert point["ok"] >= 3 and point["errors"] == {}
    assert data["metrics"]["load"]["settings"]["method"] == "POST"
    assert not data["errors"], data["errors"]
    assert not port_open("127.0.0.1", port)


# The demo's first service: a model built per request and run with autograd on, its output read once
# (.tolist()) to build the response.
GRAD_PER_REQUEST = apps.server('''
def build() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))


@app.get("/predict")
async def predict() -> dict:
    model = build()
    logits = model(torch.randn(4, 64))  # FORWARD-LINE
    return {"labels": logits.argmax(dim=1).tolist()}
''')


def test_server_rules_count_per_request_and_ignore_idle_time(tmp_path: Path) -> None:
    result, path = run_server(tmp_path, GRAD_PER_REQUEST, [1], duration=1.5)
    got = codes(result)
    forwards = result.metrics["steps"]["forwards"]
    assert forwards >= 20, result.metrics["steps"]
    p003 = finding(result, "P003")  # the forwards are seen, with autograd on
    assert p003.location is not None and p003.location.line == apps.marked_line(path, "FORWARD-LINE")
    # one .tolist() per response is normal; the idle time between requests is not "Python outside the model";
    # a model built per request moves the heap around without a leak
    assert not got & {"P005", "P013", "P007"}, [f.title for f in result.findings]
    assert not result.errors, result.errors


def test_async_endpoint_blocking_is_s001_and_s002_at_the_line(tmp_path: Path) -> None:
    result, script = run_server(tmp_path, apps.BLOCKING_ASYNC_SERVER, [1, 4])
    busy_machine = result.metrics["service"].get("s001_not_judged")  # other jobs filled the cores: not judged
    assert ({"S002"} if busy_machine else {"S001", "S002"}) <= codes(result)
    s002 = finding(result, "S002")
    assert s002.location is not None
    # the line of the async def endpoint that blocks (where to_thread goes); the stack shows the sleep under it
    assert (s002.location.file, s002.location.line) == (script.name, apps.marked_line(script, "ENDPOINT-LINE"))
    assert s002.location.function == "predict"
    assert any(f":{apps.marked_line(script, 'BLOCKING-LINE')} in infer" in f for f in s002.evidence["stack"])
    [loop] = result.metrics["service"]["loop"]
    assert loop["stall_count"] >= 5
    assert result.metrics["headline"]["loop_blocked_s"] > 0.5


def test_short_frequent_blocks_are_s002_at_the_line(tmp_path: Path) -> None:
    # issue 18: an async def that sleeps 20 ms per request never stalls the loop for 100 ms, yet every other
    # request waits behind it: the busy probes find it on the loop and name the line
    result, script = run_server(tmp_path, apps.SHORT_BLOCKS_SERVER, [1, 4])
    s002 = finding(result, "S002")
    assert s002.location is not None
    assert (s002.location.file, s002.location.line) == (script.name, apps.marked_line(script, "SHORT-BLOCK-LINE"))
    assert s002.evidence["busy_user_share"] >= 0.25 and s002.evidence["lag_p99_ms"] >= 20
    [loop] = result.metrics["service"]["loop"]
    assert loop["busy_user_share"] >= 0.25 and loop["busy"] is None  # counted in the result, not listed
    # it outranks what the profile alone would say about the model's calls
    assert result.findings[0].code in ("S001", "S002")


def test_same_endpoint_as_sync_def_is_neither(tmp_path: Path) -> None:
    result, _ = run_server(tmp_path, apps.BLOCKING_SYNC_SERVER, [1, 4])
    assert not {"S001", "S002"} & codes(result)
    points = result.metrics["load"]["points"]
    assert points[1]["throughput_rps"] > 2 * points[0]["throughput_rps"]  # the thread pool serves in parallel
    [loop] = result.metrics["service"]["loop"]
    assert loop["beats"] > 0 and loop["stall_count"] == 0


def test_fixed_slots_and_unbounded_queue_is_s003_with_the_knee_at_the_slots(tmp_path: Path) -> None:
    result, _ = run_server(tmp_path, apps.FIXED_SLOTS_SERVER, [1, 2, 4, 8, 16], duration=2.5)
    curve = result.metrics["load"]["curve"]
    assert "S003" in codes(result), curve
    assert result.metrics["load"]["knee"]["level"] == apps.SLOTS, curve
    assert result.metrics["headline"]["knee_concurrency"] == apps.SLOTS


def test_lazy_model_init_is_s005(tmp_path: Path) -> None:
    result, _ = run_server(tmp_path, apps.LAZY_INIT_SERVER, [1], duration=2.5)
    assert "S005" in codes(result), result.metrics["load"]["points"][0]
    first = result.metrics["load"]["points"][0]["first_latencies_ms"]
    assert first[0] >= 1000.0


def test_several_uvicorn_workers_each_loading_the_model_is_s004(tmp_path: Path, cli: Callable,
                                                                 result_validator: Callable) -> None:
    script = tmp_path / "multi.py"
    script.write_text(apps.MULTI_WORKER_SERVER)
    port = free_port()
    out = tmp_path / "result.json"
    run = cli("profile", "--load-url", f"http://127.0.0.1:{port}/predict", "--concurrency", "1,2",
              "--point-duration", "1", "--json", str(out), "--", sys.executable, str(script), str(port))
    assert run.exit_code == 0, run.stderr
    data = json.loads(out.read_text())
    result_validator(data)
    s004 = next(f for f in data["findings"] if f["code"] == "S004")
    assert s004["evidence"]["workers"] == 2
    # judged beyond what a bare process of the same interpreter holds after importing torch (150 MB of anonymous
    # memory with the CPU build, 280 MB with the CUDA build): the 67 MB of weights and the web framework's own
    assert s004["evidence"]["basis"] == "host" and s004["evidence"]["baseline_anon_mb"] > 50
    assert all(60 <= mb < 200 for mb in s004["evidence"]["per_worker_mb"]), s004["evidence"]
    workers = data["metrics"]["service"]["workers"]
    assert len(workers["workers"]) == 2 and workers["supervisor_pid"] == workers["root_pid"]
    assert data["metrics"]["headline"]["workers"] == 2
    assert "Worker processes" in run.stdout and "S004" in run.stdout
    assert not port_open("127.0.0.1", port)


def test_several_workers_with_a_tiny_model_are_not_s004(tmp_path: Path, cli: Callable,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers of a 1,000-parameter model: with the CUDA build of torch each held 289 MB of private memory,
    all of it torch's own, and S004 said '289 MB duplicated' (found on Python 3.10, which gets the CUDA wheel)."""
    script = tmp_path / "multi.py"
    script.write_text(apps.MULTI_WORKER_SERVER)
    port = free_port()
    out = tmp_path / "result.json"
    monkeypatch.setenv("TINY_MODEL", "1")
    run = cli("profile", "--load-url", f"http://127.0.0.1:{port}/predict", "--concurrency", "1",
              "--point-duration", "1", "--json", str(out), "--", sys.executable, str(script), str(port))
    assert run.exit_code == 0, run.stderr
    data = json.loads(out.read_text())
    workers = data["metrics"]["service"]["workers"]
    assert len(workers["workers"]) == 2 and all(w["torch_loaded"] for w in workers["workers"])
    assert workers["baseline"].endswith("-I -c 'import torch'") and workers["baseline_anon_mb"] > 50
    assert "S004" not in {f["code"] for f in data["findings"]}, workers


def test_server_that_never_answers_gives_a_partial_result(tmp_path: Path, cli: Callable) -> None:
    script = tmp_path / "quiet.py"
    script.write_text("import time\ntime.sleep(30)\n")
    port = free_port()
    run = cli("profile", "--load-url", f"http://127.0.0.1:{port}/predict", "--ready-timeout", "1",
              "--json", "-", "--quiet", "--", sys.executable, str(script))
    assert run.exit_code == 3, run.stderr
    data = json.loads(run.stdout)  # the partial result is still written
    assert any(e["source"] == "service.ready" for e in data["errors"])
    assert data["metrics"]["load"] is None
    assert "did not answer" in run.stderr


def test_server_that_exits_before_answering_is_exit_3(tmp_path: Path, cli: Callable) -> None:
    script = tmp_path / "dies.py"
    script.write_text("raise SystemExit(4)\n")
    port = free_port()
    run = cli("profile", "--load-url", f"http://127.0.0.1:{port}/predict", "--ready-timeout", "20",
              "--json", "-", "--quiet", "--", sys.executable, str(script))
    assert run.exit_code == 3, run.stderr
    data = json.loads(run.stdout)
    assert any(e["source"] == "service.ready" and "exited" in e["message"] for e in data["errors"])


@pytest.mark.parametrize("extra,message", [
    (["--concurrency", "0"], "positive"),
    (["--concurrency", "x"], "cannot read"),
    (["--steps", "5"], "do not apply"),
    (["--load-header", "nocolon"], "bad --load-header"),
    (["--point-duration", "nan"], "positive finite"),
    (["--load-timeout", "0"], "positive finite"),
])
def test_usage_errors(cli: Callable, extra: list[str], message: str) -> None:
    run = cli("profile", "--load-url", "http://127.0.0.1:9/predict", *extra, "--", sys.executable, "-c", "pass")
    assert run.exit_code == 2 and message in run.stderr


def test_bad_load_url_is_a_usage_error(cli: Callable) -> None:
    run = cli("profile", "--load-url", "ftp://nowhere", "--", sys.executable, "-c", "pass")
    assert run.exit_code == 2 and "not an http" in run.stderr


PLAIN_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()  # Ctrl-C: KeyboardInterrupt
"""


def test_our_own_stop_shows_no_keyboardinterrupt_traceback(tmp_path: Path) -> None:
    script = tmp_path / "plain.py"
    script.write_text(PLAIN_SERVER)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "infradoctor", "profile", "--no-store", "--quiet", "--load-url",
         f"http://127.0.0.1:{port}/", "--concurrency", "1", "--point-requests", "20", "--json", "out.json",
         "--", sys.executable, str(script), str(port)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["metrics"]["service"]["stop_exit_status"] == -2  # ended by our SIGINT, as before
    assert data["metrics"]["load"]["points"][0]["ok"] == 20
