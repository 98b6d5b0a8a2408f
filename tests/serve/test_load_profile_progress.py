"""``profile --load-url`` says what it is doing while it works (issue 18 item 11): a live line on a terminal, one line
per phase elsewhere, nothing on stdout with ``--json -``, nothing at all with ``--quiet``."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from infradoctor.cli.profile_load import progress_line
from infradoctor.procs import free_port, port_open

SERVER = '''
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


print("serving on", sys.argv[1], flush=True)  # the server's own stdout: never mixed into --json -
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
'''

PHASES = ("profile: starting the server: ", "profile: waiting for the server to answer http://127.0.0.1:",
          "profile: waiting for its worker processes to settle: ", "profile: load at c=1: ", "profile: load at c=2: ",
          "profile: stopping the server: ")


def profile_server(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "infradoctor", "profile", "--load-url", f"http://127.0.0.1:{port}/predict",
         "--concurrency", "1,2", "--point-duration", "0.5", "--no-store", *extra, "--",
         sys.executable, str(script), str(port)],
        capture_output=True, text=True, timeout=180, check=False, cwd=tmp_path)
    assert not port_open("127.0.0.1", port), "the server was not stopped"
    return proc


@pytest.mark.integration
def test_profile_load_url_says_what_it_is_doing_while_it_works(tmp_path: Path) -> None:
    proc = profile_server(tmp_path, "--json", "-")
    assert proc.returncode == 0, proc.stderr
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip().startswith("profile: ")]
    firsts = [next((i for i, line in enumerate(lines) if line.startswith(p)), None) for p in PHASES]
    assert None not in firsts and firsts == sorted(firsts), lines  # every phase, in order
    assert len(lines) == len(PHASES), lines  # off a terminal: one line per phase, not one per tick
    data = json.loads(proc.stdout)  # stdout carries the result alone (the server's own print went to stderr)
    assert data["command"] == "profile" and len(data["metrics"]["load"]["points"]) == 2
    assert "serving on" in proc.stderr


@pytest.mark.integration
def test_quiet_profile_load_url_prints_no_progress(tmp_path: Path) -> None:
    proc = profile_server(tmp_path, "--json", "-", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "profile: " not in proc.stderr
    assert json.loads(proc.stdout)["metrics"]["service"]["ready_s"] > 0


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_line_is_rewritten_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    say = progress_line(enabled=True)
    assert say is not None
    for seconds in range(3):
        say(f"waiting for the server to answer http://127.0.0.1:8000/: {seconds} s")
    say("load at c=1: 12 requests so far, 0.4/3 s " + "x" * 200)
    say("")
    text = terminal.getvalue()
    assert "\n" not in text and text.count("\r  profile: ") == 4
    assert all(len(part) <= 120 for part in text.split("\r"))  # long details are cut, the line stays one line
    assert text.endswith("\r")  # the live line is cleared before the summary
    assert progress_line(enabled=False) is None  # --quiet
