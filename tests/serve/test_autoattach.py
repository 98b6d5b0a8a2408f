"""The injected loop watcher: a process's event loop is watched without changing the program."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import infradoctor
from infradoctor.serve import autoattach
from infradoctor.serve.rules import s002_event_loop_blocked as s002
from tests.serve.apps import marked_line

pytestmark = pytest.mark.integration

INJECT = Path(infradoctor.__file__).parent / "profile" / "inject"  # the one injected sitecustomize
SRC = Path(infradoctor.__file__).parent.parent

PROGRAM = """
import asyncio, sys, time

if sys.argv[1] == "uvloop":
    import uvloop
    new_loop = uvloop.new_event_loop
else:
    new_loop = asyncio.new_event_loop


def handler():
    time.sleep(0.3)  # BLOCKING-LINE


async def main():
    await asyncio.sleep(0.1)
    for _ in range(2):
        handler()  # ENDPOINT-LINE
        await asyncio.sleep(0.05)


loop = new_loop()
loop.run_until_complete(main())
loop.close()
"""


def run_program(tmp_path: Path, kind: str, extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(PROGRAM))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(INJECT), str(SRC), os.environ.get("PYTHONPATH", "")]),
           **extra_env}
    return subprocess.run([sys.executable, str(script), kind], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_injected_watcher_names_the_blocking_line(tmp_path: Path, kind: str) -> None:
    if kind == "uvloop":
        pytest.importorskip("uvloop")
    out = tmp_path / "evidence"
    out.mkdir()
    done = run_program(tmp_path, kind, {autoattach.DIR_ENV: str(out), autoattach.STALL_ENV: "0.08"})
    assert done.returncode == 0, done.stderr
    [evidence] = autoattach.read_loop_evidence(out)
    assert evidence.pid is not None and evidence.stall_count >= 2  # a busy machine may add short stalls
    assert len([s for s in evidence.stalls if s.duration_s >= 0.2]) == 2  # the two 300 ms blocks
    [finding] = s002.check(evidence)
    assert finding.location is not None
    assert finding.location.file == str(tmp_path / "prog.py")
    # the line in the async def that blocks the loop (the fix goes there: to_thread, or a def endpoint) ...
    assert finding.location.line == marked_line(tmp_path / "prog.py", "ENDPOINT-LINE")
    assert finding.location.function == "main"
    # ... and the stack shows the blocking call under it
    blocking = marked_line(tmp_path / "prog.py", "BLOCKING-LINE")
    assert any(f"prog.py:{blocking} in handler" in line for line in finding.evidence["stack"])


def test_nothing_happens_without_the_variable(tmp_path: Path) -> None:
    done = run_program(tmp_path, "asyncio", {autoattach.DIR_ENV: ""})
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_since_drops_stalls_before_serving() -> None:
    from infradoctor.serve.looplag import LoopLagEvidence, LoopStall

    stalls = tuple(LoopStall(started_s=t, duration_s=0.5, site=None, stack=(), samples=1) for t in (1.0, 5.0, 6.0))
    evidence = LoopLagEvidence(0.02, 0.1, 10.0, 100, 0.1, 1.0, 500.0, 1.5, 3, stalls, pid=1, started_unix=1000.0)
    later = evidence.since(1004.0)
    assert later.stall_count == 2 and later.blocked_s == 1.0 and later.observed_s == 6.0
    assert evidence.since(900.0) == evidence


FORKING = """
import asyncio, os, sys, time


async def idle():
    await asyncio.sleep(0.05)


def block():
    time.sleep(0.3)  # CHILD-BLOCKING-LINE


asyncio.run(idle())  # the parent's loop: watched first
pid = os.fork()
if pid == 0:
    async def child():
        await asyncio.sleep(0.05)
        block()  # CHILD-ENDPOINT-LINE
        await asyncio.sleep(0.05)
    asyncio.run(child())
    sys.exit(0)
print(pid, flush=True)
os.waitpid(pid, 0)
"""


def test_forked_child_watches_its_own_loop(tmp_path: Path) -> None:
    out = tmp_path / "evidence"
    out.mkdir()
    script = tmp_path / "forking.py"
    script.write_text(textwrap.dedent(FORKING))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(INJECT), str(SRC), os.environ.get("PYTHONPATH", "")]),
           autoattach.DIR_ENV: str(out), autoattach.STALL_ENV: "0.08"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    found = autoattach.read_loop_evidence(out)
    assert len(found) == 2  # parent and child, each its own file
    child_pid = int(done.stdout.split()[-1])
    [child] = [e for e in found if e.pid == child_pid]
    [stall] = [s for s in child.stalls if s.duration_s >= 0.2]
    assert stall.site is not None and stall.site.line == marked_line(script, "CHILD-ENDPOINT-LINE")
    assert stall.stack[0].line == marked_line(script, "CHILD-BLOCKING-LINE")
