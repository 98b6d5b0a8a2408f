"""Stage timers: context manager and decorator, sync and async, recorded into the current request."""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading

import pytest

from infradoctor.serve import current_timing, record, request_timing, stage
from infradoctor.serve.stages import RequestTiming, activate, deactivate


class FakeClock:
    """A nanosecond clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += int(ms * 1e6)


def test_context_manager_records_duration_in_current_request() -> None:
    clock = FakeClock()
    with request_timing("r1", clock=clock) as timing:
        with stage("preprocess"):
            clock.advance_ms(12.5)
        clock.advance_ms(3)
        with stage("inference"):
            clock.advance_ms(40)
    assert timing.request_id == "r1"
    assert timing.durations == {"preprocess": 12.5, "inference": 40.0}
    assert list(timing.durations) == ["preprocess", "inference"]
    assert timing.elapsed_ms() == pytest.approx(55.5)


def test_repeated_and_nested_stages() -> None:
    clock = FakeClock()
    with request_timing(clock=clock) as timing:
        for _ in range(3):
            with stage("tokenize"):
                clock.advance_ms(2)
        with stage("outer"):
            clock.advance_ms(1)
            with stage("inner"):
                clock.advance_ms(5)
    assert timing.durations == {"tokenize": 6.0, "inner": 5.0, "outer": 6.0}


def test_decorator_sync_and_async() -> None:
    clock = FakeClock()

    @stage("prep")
    def prep(x: int) -> int:
        clock.advance_ms(7)
        return x + 1

    @stage("infer")
    async def infer(x: int) -> int:
        await asyncio.sleep(0)
        clock.advance_ms(9)
        return x * 2

    async def handler() -> tuple[int, RequestTiming]:
        with request_timing(clock=clock) as timing:
            async with stage("whole"):
                y = await infer(prep(1))
        return y, timing

    y, timing = asyncio.run(handler())
    assert y == 4
    assert timing.durations == {"prep": 7.0, "infer": 9.0, "whole": 16.0}
    assert prep.__name__ == "prep" and infer.__name__ == "infer"
    assert asyncio.iscoroutinefunction(infer)


def test_stage_exception_still_records_and_propagates() -> None:
    clock = FakeClock()
    with request_timing(clock=clock) as timing:
        with pytest.raises(ValueError), stage("validate"):
            clock.advance_ms(4)
            raise ValueError("bad input")
    assert timing.durations == {"validate": 4.0}


def test_outside_a_request_is_a_noop() -> None:
    assert current_timing() is None
    with stage("nothing"):
        pass
    record("queue", 3.0)
    assert current_timing() is None


def test_record_adds_external_duration() -> None:
    with request_timing() as timing:
        record("queue_wait", 2.5)
        record("queue_wait", 0.5)
    assert timing.durations == {"queue_wait": 3.0}


def test_concurrent_requests_do_not_mix() -> None:
    clock = FakeClock()

    async def one(name: str, steps: int) -> RequestTiming:
        with request_timing(name, clock=clock) as timing:
            for _ in range(steps):
                with stage(name):
                    await asyncio.sleep(0)
        return timing

    async def both() -> list[RequestTiming]:
        return list(await asyncio.gather(one("a", 3), one("b", 5)))

    a, b = asyncio.run(both())
    assert set(a.durations) == {"a"} and set(b.durations) == {"b"}


def test_context_follows_request_into_thread_pool() -> None:
    """Starlette runs def endpoints in a thread with a copy of the context: stages land in the same record."""
    clock = FakeClock()
    timing = RequestTiming("t", clock=clock)
    token = activate(timing)
    try:
        ctx = contextvars.copy_context()
    finally:
        deactivate(token)

    def endpoint() -> None:
        with stage("threaded"):
            clock.advance_ms(3)

    thread = threading.Thread(target=ctx.run, args=(endpoint,))
    thread.start()
    thread.join(timeout=10)
    assert timing.durations == {"threaded": 3.0}


@pytest.mark.parametrize("kwargs", [{"cuda": True}, {"sync": True}])
def test_cuda_options_fall_back_to_wall_time_without_cuda(kwargs: dict[str, bool]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("covered by the gpu tests")
    clock = FakeClock()
    with request_timing(clock=clock) as timing:
        with stage("inference", **kwargs):
            torch.ones(4) @ torch.ones(4)
            clock.advance_ms(8)
    assert timing.durations == {"inference": 8.0}
    assert timing.pending == []


def test_cuda_stage_never_imports_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    clock = FakeClock()
    with request_timing(clock=clock) as timing:
        with stage("inference", cuda=True):
            clock.advance_ms(1)
    assert "torch" not in sys.modules
    assert timing.durations == {"inference": 1.0}
