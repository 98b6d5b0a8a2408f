"""Ctrl-C in ``load`` says nothing but that it was interrupted: no traceback during start-up, in a generator
process that is still starting, or from uvloop when the interrupt lands inside a transport callback.

Each Ctrl-C is delivered at a chosen moment, not after a guessed delay: a ``sitecustomize`` put on the child's path
sends SIGINT to the process group (as a terminal does) when a given module is first imported, or from inside the
client's ``data_received``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from infradoctor.load.nullserver import null_server

pytestmark = pytest.mark.integration

HOOK = textwrap.dedent('''
    import importlib.abc, os, signal, sys

    _TARGET = os.environ.get("CTRL_C_AT_IMPORT")
    _IN_CHILD = os.environ.get("CTRL_C_IN_CHILD") == "1"

    class _CtrlC(importlib.abc.MetaPathFinder):
        fired = False

        def find_spec(self, name, path=None, target=None):
            if name == _TARGET and not _CtrlC.fired:
                _CtrlC.fired = True
                os.killpg(os.getpgid(0), signal.SIGINT)  # the user's Ctrl-C reaches every process of the job
                for _ in range(1000):
                    pass  # delivered here, inside the import
            return None

    if _TARGET and ("--multiprocessing-fork" in sys.argv) == _IN_CHILD:
        sys.meta_path.insert(0, _CtrlC())
''')


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with null_server() as address:
        yield address


def _as_from_a_terminal() -> None:  # a background job (CI, a tool's shell) inherits SIGINT ignored
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run(tmp_path: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(HOOK, encoding="utf-8")
    path = os.pathsep.join(p for p in (str(hooks), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "infradoctor", *args],
        capture_output=True, text=True, timeout=120, start_new_session=True, preexec_fn=_as_from_a_terminal,
        env={**os.environ, "PYTHONPATH": path, "INFRADOCTOR_HOME": str(tmp_path / "store"), **env},
    )


@pytest.mark.parametrize("module", [
    "infradoctor.cli.load",  # the command's module, while the parser is built
    "infradoctor.load.command",  # the library, once the arguments are read
    "infradoctor.load.engine",  # the engine, just before the sweep
])
def test_ctrl_c_during_start_up_prints_no_traceback(tmp_path: Path, url: str, module: str) -> None:
    run = _run(tmp_path, ["load", url, "-c", "1", "-d", "5"], {"CTRL_C_AT_IMPORT": module})
    assert run.returncode == 130, run.stdout + run.stderr
    assert "Traceback" not in run.stderr + run.stdout and "KeyboardInterrupt" not in run.stderr
    assert "interrupted" in run.stderr + run.stdout  # said once, by the CLI or the partial result's note


def test_ctrl_c_while_generator_processes_start_prints_no_traceback(tmp_path: Path, url: str) -> None:
    """A second generator process still importing when Ctrl-C comes: it ignores it (the parent stops it)."""
    run = _run(tmp_path, ["load", url, "-c", "4", "-p", "2", "-d", "5"],
               {"CTRL_C_AT_IMPORT": "infradoctor.load.multiproc", "CTRL_C_IN_CHILD": "1"})
    assert run.returncode == 130, run.stdout + run.stderr
    assert "Traceback" not in run.stderr + run.stdout and "BrokenProcessPool" not in run.stderr


CALLBACK_INTERRUPT = textwrap.dedent('''
    import os, signal, sys
    from infradoctor.load import client
    from infradoctor.load.engine import run_point
    from infradoctor.load.spec import RequestSpec

    original = client.Connection.data_received
    calls = 0

    def data_received(self, data):
        global calls
        calls += 1
        if calls == 20:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass  # the KeyboardInterrupt is raised here, inside uvloop's read callback
        return original(self, data)

    client.Connection.data_received = data_received
    try:
        point = run_point(RequestSpec(sys.argv[1]), concurrency=2, duration_s=3.0, timeout_s=5,
                          on_request=lambda outcome: None)  # the Python connection, not the compiled fast path
    except KeyboardInterrupt:
        print("interrupted after", calls, "reads")
    else:
        print("not interrupted:", point.completed, "requests", point.errors)
''')


def test_ctrl_c_inside_a_transport_callback_interrupts_without_uvloop_noise(tmp_path: Path, url: str) -> None:
    """uvloop caught the KeyboardInterrupt, printed 'Fatal error on transport' and a traceback, and went on."""
    pytest.importorskip("uvloop")
    script = tmp_path / "interrupt.py"
    script.write_text(CALLBACK_INTERRUPT, encoding="utf-8")
    run = subprocess.run([sys.executable, str(script), url], capture_output=True, text=True, timeout=60,
                         start_new_session=True, preexec_fn=_as_from_a_terminal)
    assert "Fatal error on transport" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    # the signal lands in the 20th read; uvloop may hand it to Python one callback later
    reads = re.match(r"interrupted after (\d+) reads", run.stdout)
    assert reads is not None and 20 <= int(reads.group(1)) <= 25, run.stdout + run.stderr
