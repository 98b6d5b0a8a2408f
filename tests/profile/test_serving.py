"""The launcher API as `profile --load-url` uses it: a real uvicorn server started under the profiler, requests
driven at it, stopped with SIGINT; evidence aggregated per request (top-level forward)."""

from __future__ import annotations

import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

from infradoctor.procs import free_port, wait_for_http
from infradoctor.profile.launcher import ProfileOptions, start_profiled
from infradoctor.profile.result import build_result
from infradoctor.profile.rules import RuleOptions

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

APP = """
    import torch
    from fastapi import FastAPI

    torch.set_num_threads(1)
    app = FastAPI()


    def build():
        model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
        model.load_state_dict(torch.load("weights.pt", weights_only=True))
        return model.eval()


    @app.get("/predict")
    def predict():
        model = build()
        with torch.inference_mode():
            out = model(torch.randn(1, 32))
        return {"label": int(out.argmax())}
"""


def test_server_that_loads_its_model_per_request(tmp_path: Path, result_validator) -> None:
    import torch

    (tmp_path / "app.py").write_text(textwrap.dedent(APP), encoding="utf-8")
    model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    torch.save(model.state_dict(), tmp_path / "weights.pt")
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), "--log-level", "warning"]
    with start_profiled(argv, ProfileOptions(cwd=str(tmp_path))) as proc:
        assert wait_for_http(f"http://127.0.0.1:{port}/predict", timeout=60, proc=proc.popen)
        for _ in range(25):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/predict", timeout=10) as response:
                assert response.status == 200
        assert proc.stop() == 0  # uvicorn shuts down cleanly on SIGINT
        evidence = proc.collect()
    assert evidence.stop_reason == "stopped"
    # judged as profile --load-url judges a server: per request (one sample per request is the API: P002 low)
    result = build_result(evidence, started_at="2026-11-29T10:00:00Z",
                          rule_options=RuleOptions(serving=True, requests=25))
    result_validator(result)
    assert not result.errors
    assert result.metrics["steps"]["boundary"] == "forward"  # one step per request
    assert result.metrics["steps"]["count"] >= 24
    top = result.ranked()[0]
    assert top.code == "P006"
    lines = textwrap.dedent(APP).splitlines()
    load_line = next(i for i, line in enumerate(lines, 1) if "torch.load(" in line)
    assert top.location is not None and (top.location.file, top.location.line) == (str(tmp_path / "app.py"),
                                                                                   load_line)
    assert top.evidence["loads"][0]["calls"] >= 26
