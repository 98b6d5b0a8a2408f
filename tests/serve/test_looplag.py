"""Event-loop lag monitor on real asyncio and uvloop loops: lag, stalls and the blocking call site."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from infradoctor.serve import LoopLagEvidence, LoopLagMonitor
from infradoctor.serve.looplag import is_user_file

HERE = Path(__file__)
BLOCKING_LINE = next(i for i, text in enumerate(HERE.read_text().splitlines(), 1) if text.endswith("# BLOCKING-LINE"))
ENDPOINT_LINE = next(i for i, text in enumerate(HERE.read_text().splitlines(), 1) if text.endswith("# ENDPOINT-LINE"))


LONG_S = 0.2
"""Stalls at least this long are the test's own 300 ms blocks (scheduler noise on a busy machine is shorter)."""


def block_for(seconds: float) -> None:
    time.sleep(seconds)  # BLOCKING-LINE


async def blocked_then_idle(monitor: LoopLagMonitor, block_s: float, times: int) -> LoopLagEvidence:
    monitor.start()
    await asyncio.sleep(0.05)
    for _ in range(times):
        block_for(block_s)  # ENDPOINT-LINE
        await asyncio.sleep(0.05)
    return monitor.stop()


def test_stall_names_the_blocking_line() -> None:
    monitor = LoopLagMonitor(interval_s=0.01, stall_threshold_s=0.06)
    evidence = asyncio.run(blocked_then_idle(monitor, 0.3, 2))
    # one-sided: a busy machine may add short stalls of its own; the two 300 ms blocks are always there
    assert evidence.stall_count >= 2
    assert evidence.blocked_s >= 0.4
    assert evidence.lag_max_ms is not None and evidence.lag_max_ms >= 200
    long_stalls = [s for s in evidence.stalls if s.duration_s >= LONG_S]
    assert len(long_stalls) == 2
    for stall in long_stalls:
        assert stall.site is not None
        # the line of the async def that holds the loop: where the fix goes (to_thread, a def endpoint)
        assert (stall.site.file, stall.site.line, stall.site.function) == (str(HERE), ENDPOINT_LINE,
                                                                             "blocked_then_idle")
        assert stall.site.coroutine
        assert stall.samples >= 1
        assert [f.function for f in stall.stack[:2]] == ["block_for", "blocked_then_idle"]
    assert 0 < evidence.blocked_fraction < 1


def test_uvloop_is_watched_too() -> None:
    uvloop = pytest.importorskip("uvloop")
    monitor = LoopLagMonitor(interval_s=0.01, stall_threshold_s=0.06)
    loop = uvloop.new_event_loop()
    try:
        evidence = loop.run_until_complete(blocked_then_idle(monitor, 0.3, 1))
    finally:
        loop.close()
    [stall] = [s for s in evidence.stalls if s.duration_s >= LONG_S]
    assert stall.site is not None and stall.site.line == ENDPOINT_LINE
    assert stall.stack[0].line == BLOCKING_LINE


def test_awaiting_loop_has_no_stalls() -> None:
    async def healthy(monitor: LoopLagMonitor) -> LoopLagEvidence:
        monitor.start()
        for _ in range(20):
            await asyncio.sleep(0.01)
        return monitor.stop()

    evidence = asyncio.run(healthy(LoopLagMonitor(interval_s=0.01, stall_threshold_s=0.25)))
    assert evidence.stall_count == 0 and evidence.stalls == ()
    assert evidence.beats >= 5
    assert evidence.lag_p50_ms is not None and evidence.lag_p50_ms < 250


def test_monitor_started_from_another_thread_and_loop_closing() -> None:
    loop = asyncio.new_event_loop()
    monitor = LoopLagMonitor(interval_s=0.01, stall_threshold_s=0.05).start(loop)
    try:
        loop.run_until_complete(asyncio.sleep(0.1))
        loop.call_soon(block_for, 0.2)
        loop.run_until_complete(asyncio.sleep(0.1))
    finally:
        loop.close()
    evidence = monitor.stop()
    assert not monitor.running
    assert evidence.stall_count >= 1
    assert any(s.site is not None and s.site.line == BLOCKING_LINE for s in evidence.stalls)


def test_evidence_json_round_trip(tmp_path: Path) -> None:
    monitor = LoopLagMonitor(interval_s=0.01, stall_threshold_s=0.06)
    evidence = asyncio.run(blocked_then_idle(monitor, 0.2, 1))
    path = tmp_path / "loop.json"
    monitor.write_evidence(path)
    again = LoopLagEvidence.from_dict(json.loads(path.read_text()))
    assert again.stalls == evidence.stalls
    assert again.stall_count == evidence.stall_count
    assert LoopLagEvidence.from_dict(evidence.to_dict()) == evidence


def test_user_files() -> None:
    assert is_user_file(str(HERE))
    assert not is_user_file(asyncio.__file__)
    assert not is_user_file(pytest.__file__)
    assert not is_user_file("<frozen importlib._bootstrap>")
    import infradoctor.serve.looplag as own

    assert not is_user_file(own.__file__)


def test_bad_settings() -> None:
    with pytest.raises(ValueError):
        LoopLagMonitor(interval_s=0)
