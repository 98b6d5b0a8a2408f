"""The engine's bookkeeping driven by hand with a fake clock and a fake transport: exact, no network, no sleeps."""

from __future__ import annotations

import asyncio
import shutil
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infradoctor.load.closed_loop import ClosedLoopDriver
from infradoctor.load.driver import PointDriver
from infradoctor.load.histogram import Histogram
from infradoctor.load.open_loop import OpenLoopDriver
from infradoctor.load.point import PointResult
from infradoctor.load.spec import RequestSpec

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nServer-Timing: app;dur=200\r\n\r\nok"
BUSY = b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n"


def require_compiled() -> None:
    """Skip where the compiled fast path could not be built (no C compiler or Python headers); fail where it could."""
    from infradoctor.load import client

    if client._fastpath is None:
        headers = Path(sysconfig.get_paths()["include"], "Python.h")
        if shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) and headers.exists():
            pytest.fail("infradoctor.load._fastpath was not built though a C compiler is here: reinstall the package")
        pytest.skip("infradoctor.load._fastpath not built (no C compiler or Python headers)")


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.aborted = True


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def make_run(
    loop: asyncio.AbstractEventLoop,
    clock: FakeClock,
    *,
    rate: float | None = None,
    pure_python: bool = False,
    spec: RequestSpec | None = None,
    duration_s: float | None = 2.0,
    max_requests: int | None = None,
) -> Any:
    result = PointResult(
        label="t",
        mode="open" if rate else "closed",
        concurrency=None if rate else 1,
        rate=rate,
        arrivals="constant" if rate else None,
        timeout_s=1.0,
        latency_from_send=Histogram() if rate else None,
        pacer_lag=Histogram() if rate else None,
    )
    options: dict[str, Any] = {
        "duration_s": duration_s,
        "max_requests": max_requests,
        "connect_timeout_s": 1.0,
        "pure_python": pure_python,
        "progress_interval_s": 1.0,
        "clock": clock,
    }
    spec = spec or RequestSpec("http://127.0.0.1:9/x")
    run: PointDriver
    if rate:
        run = OpenLoopDriver(spec, result, max_connections=4, **options)
    else:
        run = ClosedLoopDriver(spec, result, **options)
    run.begin(loop, clock.now)
    return run


@pytest.mark.parametrize("pure_python", [False, True])
def test_closed_loop_latencies_windows_and_timeout_are_exact(
    loop: asyncio.AbstractEventLoop, pure_python: bool
) -> None:
    clock = FakeClock(100.0)
    run = make_run(loop, clock, pure_python=pure_python)
    conn = run.conn_class(run, 0)
    transport = FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    run.conns.add(conn)
    run._issue(0, conn)
    clock.now = 100.25
    conn.data_received(OK)  # 250 ms; the worker sends its next request at once
    clock.now = 101.5
    conn.data_received(BUSY)  # 1250 ms, a 503
    clock.now = 103.0  # the third request has waited 1.5 s > the 1 s timeout
    run._housekeeping()
    res = run.result
    assert len(transport.written) == 3 and transport.aborted
    assert res.errors == {"http_503": 1, "read_timeout": 1}
    assert res.status_counts == {200: 1, 503: 1}
    assert (res.completed, res.ok, res.completed_in_window, res.ok_in_window) == (3, 1, 2, 1)
    # the latency percentiles are of the one successful response; the failures are timed apart, the read
    # timeout at exactly the timeout
    assert (res.latency.count, res.latency.min_us, res.latency.max_us) == (1, 250_000, 250_000)
    assert (res.error_latency.count, res.error_latency.min_us, res.error_latency.max_us) == (2, 1_000_000, 1_250_000)
    assert res.first_latencies_ms == [250.0]
    assert res.windows == [  # [completed, failed, success latency sum, success latency max]
        [1.0, 0.0, 250_000.0, 250_000.0],
        [1.0, 1.0, 0.0, 0.0],
        [1.0, 1.0, 0.0, 0.0],
    ]
    res.duration_s = 2.0  # (run() sets it at the end)
    assert res.throughput_rps == pytest.approx(0.5)  # 1 success in the 2 s window, 2 completed in it
    assert res.completed_rps == pytest.approx(1.0)
    assert res.stages["app"].count == 1 and res.network is not None
    assert res.network.percentiles_us([50.0])[0] == pytest.approx(50_000, rel=0.001)  # 250 ms - 200 ms server
    assert run.stopping  # the 2 s window is over


def test_open_loop_counts_from_the_intended_time(loop: asyncio.AbstractEventLoop) -> None:
    clock = FakeClock(50.0)
    run = make_run(loop, clock, rate=10.0)
    conn = run.conn_class(run, -1)
    transport = FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    run.conns.add(conn)
    run.idle.append(conn)
    clock.now = 50.31  # the pacer wakes late: 0.0, 0.1, 0.2 and 0.3 are due
    run._pacer_tick()
    assert len(transport.written) == 1 and len(run.pending) == 3
    assert run.result.pacer_lag is not None and run.result.pacer_lag.max_us == 310_000
    clock.now = 50.35
    conn.data_received(OK)  # first request: intended 50.0, sent 50.3
    res = run.result
    assert res.latency.max_us == 350_000  # from the intended time (50.0)
    assert res.latency_from_send is not None and res.latency_from_send.max_us == 40_000  # from the write (50.31)
    assert len(transport.written) == 2  # the freed connection took the oldest waiting request
    run._begin_stop()  # requests still waiting for a connection are unsent: no response, so no latency
    assert res.unsent == 2 and res.latency.count == 1 and res.completed == 1
    tasks = list(run.tasks)  # connects the dispatch started for the waiting requests
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def test_open_loop_throughput_is_not_biased_by_latency() -> None:
    # 10 requests at 5/s in a 2 s point, each taking 310 ms: 9 complete inside the window, at 0.31 ... 1.91 s
    point = PointResult(
        label="r=5",
        mode="open",
        concurrency=None,
        rate=5.0,
        arrivals="constant",
        timeout_s=5,
        duration_s=2.0,
        completed=10,
        ok=10,
        completed_in_window=9,
        ok_in_window=9,
        first_completion_s=0.31,
        last_window_completion_s=1.91,
    )
    assert point.completed_rps == pytest.approx(5.0)
    assert point.throughput_rps == pytest.approx(5.0)
    closed = PointResult(
        label="c=1",
        mode="closed",
        concurrency=1,
        rate=None,
        arrivals=None,
        timeout_s=5,
        duration_s=2.0,
        completed=10,
        ok=10,
        completed_in_window=9,
        ok_in_window=6,
        first_completion_s=0.31,
        last_window_completion_s=1.91,
    )
    assert closed.completed_rps == pytest.approx(4.5) and closed.throughput_rps == pytest.approx(3.0)


def drive_closed_loop(run: ClosedLoopDriver, clock: FakeClock, responses: list[tuple[float, bytes]]) -> FakeTransport:
    """One worker; each response arrives ``dt`` seconds after the previous one; housekeeping every 0.1 s."""
    transport = FakeTransport()
    conn = run.conn_class(run, 0)
    conn.connection_made(transport)  # type: ignore[arg-type]
    run.conns.add(conn)
    run._issue(0, conn)
    next_tick = clock.now + 0.1
    for dt, raw in responses:
        clock.now += dt
        if clock.now >= next_tick:
            run._housekeeping()
            next_tick = clock.now + 0.1
        if conn.closed or not conn.busy:
            break
        conn.data_received(raw)
    run._fold()
    return transport


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@pytest.mark.parametrize(
    "capture,max_requests",
    [((), None), (("server-timing", "x-envoy-upstream-service-time"), None), ((), 1200)],
)
def test_fast_path_counts_exactly_what_the_general_path_counts(
    loop: asyncio.AbstractEventLoop,
    monkeypatch: pytest.MonkeyPatch,
    capture: tuple[str, ...],
    max_requests: int | None,
    compiled: bool,
) -> None:
    """The closed loop's batched fast path (plain 200s; compiled, or in Python) against the one-by-one path on the
    same response stream: histograms, windows, counters, server stages and first latencies are identical."""
    import random

    from infradoctor.load import client
    from infradoctor.load.client import FastConnection, FastHeaderConnection, HeaderConnection, connection_class

    if compiled:
        require_compiled()
    else:
        monkeypatch.setenv(client.COMPILED_ENV, "0")

    rng = random.Random(7)
    plain = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    created = b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"
    timed = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nServer-Timing: app;dur=0.2\r\n\r\nok"
    upper = b"HTTP/1.1 200 OK\r\nX-ENVOY-UPSTREAM-SERVICE-TIME: 1\r\nContent-Length: 0\r\n\r\n"
    in_body = b"HTTP/1.1 200 OK\r\nContent-Length: 26\r\n\r\n\r\nserver-timing: app;dur=9"
    responses: list[tuple[float, bytes]] = []
    for i in range(3000):  # ~1 ms apart with a few 0.4 s stalls: crosses one-second windows and the 2.5 s end
        raw = plain
        if i % 97 == 13:
            raw = BUSY
        elif i % 211 == 5:
            raw = created
        elif i % 7 == 3:
            raw = (timed, upper, in_body)[i % 3]
        responses.append((rng.uniform(0.0002, 0.0015) if i % 500 else 0.4, raw))

    results = []
    for fast in (True, False):
        clock = FakeClock(10.0)
        spec = RequestSpec("http://127.0.0.1:9/x", capture_headers=capture)
        run = make_run(
            loop, clock, spec=spec, duration_s=None if max_requests else 2.5, max_requests=max_requests
        )
        assert run.fast
        if not fast:
            run.fast = False
            run.conn_class = connection_class(
                capture=frozenset(h.encode() for h in capture),
                stream=False,
                openai=False,
                pure_python=False,
                clock=clock,
            )
            assert not issubclass(run.conn_class, (FastConnection, FastHeaderConnection))
        else:
            assert issubclass(run.conn_class, FastHeaderConnection if capture else FastConnection)
        assert issubclass(run.conn_class, HeaderConnection) == bool(capture)
        buffered: list[int] = []
        original_fold = run._fold

        def fold(run: ClosedLoopDriver = run, original=original_fold, buffered: list[int] = buffered) -> None:
            buffered.append(len(run.fast_sink))
            original()

        run._fold = fold  # type: ignore[method-assign]
        transport = drive_closed_loop(run, clock, responses)
        if fast:
            (conn,) = run.conns
            assert conn.compiled == compiled  # type: ignore[attr-defined]
            if compiled:  # the compiled reader took the plain 200s (all in one read each here)
                assert conn.reader.taken > 1000 and conn.reader.enabled  # type: ignore[attr-defined]
        results.append((run.result, len(transport.written), run.result.latency.sample_ms(100), run.issued,
                        run.finished, buffered))
    (fast_res, fast_sent, fast_sample, *fast_counts, buffered), (slow_res, slow_sent, slow_sample, *slow_counts, _) = (
        results
    )
    assert sum(buffered) > 1000  # the fast path did carry most responses
    assert fast_res.to_dict() == slow_res.to_dict()
    assert fast_res.latency.counts.tolist() == slow_res.latency.counts.tolist()
    assert (fast_res.latency.total_us, fast_res.latency.max_us) == (slow_res.latency.total_us, slow_res.latency.max_us)
    assert fast_sample == slow_sample and len(fast_sample) == 100
    assert (fast_sent, fast_counts) == (slow_sent, slow_counts)
    assert fast_res.status_counts[201] > 0 and set(fast_res.errors) == {"http_503"}
    if capture:  # the stage timings of the responses that carried them were all read
        assert set(fast_res.stages) == {"app", "envoy_upstream"} and fast_res.stages["app"].count > 50
    if max_requests:  # exactly that many were sent, all answered
        assert run.stopping and fast_res.sent == fast_res.completed == fast_res.completed_in_window == max_requests
    else:  # the point ended at 2.5 s: the worker stopped issuing, one response came after the end
        assert run.stopping and fast_res.completed == fast_res.completed_in_window + 1 and fast_res.completed > 1000


def test_a_failure_after_the_window_ends_the_closed_loop(loop: asyncio.AbstractEventLoop) -> None:
    clock = FakeClock(100.0)
    run = make_run(loop, clock)
    conn = run.conn_class(run, 0)
    transport = FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    run.conns.add(conn)
    run._issue(0, conn)
    clock.now = 102.5  # past the 2 s window: the connection is reset before any byte of the response came
    conn.connection_lost(ConnectionResetError())
    assert run.stopping and run.result.errors == {"reset": 1}
    loop.run_until_complete(asyncio.sleep(0.01))  # no reconnect was scheduled for the worker
    assert not run.tasks and len(transport.written) == 1 and run.result.sent == 1
