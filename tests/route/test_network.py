from __future__ import annotations

import socket
from pathlib import Path

import pytest

from infradoctor.procs import free_port
from infradoctor.route.network import (
    CONNECT_TIMEOUT_S,
    check_health,
    is_syn_retransmit,
    measure_bandwidth,
    parse_counter,
    probe_connects,
    read_counter,
    resolve_addresses,
)
from tests.route.servers import backends


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"42", 42),
        (b'{"requests": 17, "other": 1}', 17),
        (b'{"requests_total": 9.0}', 9),
        (b"# HELP x\nhttp_requests_total{code=\"200\"} 5\nhttp_requests_total{code=\"500\"} 2\nother 9\n", 7),
        (b'{"nothing": true}', None),
        (b"", None),
        (b"<html>", None),
    ],
)
def test_parse_counter(body: bytes, expected: int | None) -> None:
    assert parse_counter(body) == expected


def test_syn_retransmit_times_are_recognised() -> None:
    assert CONNECT_TIMEOUT_S >= 3.0  # a connect needing the second SYN retransmit (3 s) completes
    assert is_syn_retransmit(1.002) and is_syn_retransmit(1.2) and is_syn_retransmit(3.01)
    assert not is_syn_retransmit(0.0004) and not is_syn_retransmit(0.5) and not is_syn_retransmit(2.0)
    assert not is_syn_retransmit(4.0)


def test_a_dropped_syn_is_a_retransmit_not_a_failure() -> None:
    """A listener whose accept queue is full drops SYNs; the client's retransmit at ~1 s gets through."""
    import contextlib
    import threading

    done = threading.Event()
    held: list[socket.socket] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)  # a full accept queue after one connection
        listener.settimeout(0.05)
        port = listener.getsockname()[1]

        def drain_slowly() -> None:  # accepts one connection every 0.4 s, like an overloaded single-threaded server
            while not done.wait(0.4):
                with contextlib.suppress(OSError):
                    held.append(listener.accept()[0])

        thread = threading.Thread(target=drain_slowly, daemon=True)
        thread.start()
        try:
            (probe,) = probe_connects([("slow", f"http://127.0.0.1:{port}")], count=3, interval_s=0)
        finally:
            done.set()
            thread.join(timeout=5)
            for conn in held:
                conn.close()
    assert probe.attempts == 3 and probe.failures == {}  # with a 1 s timeout these were connect_timeout
    assert probe.syn_retransmits >= 1
    assert all(is_syn_retransmit(ms / 1000.0) for ms in probe.syn_retransmit_ms)
    assert probe.to_dict()["syn_retransmits"] == probe.syn_retransmits


def test_connect_probes_honour_the_stop_signal() -> None:
    import threading
    import time

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        port = listener.getsockname()[1]
        stop = threading.Event()
        threading.Timer(0.3, stop.set).start()
        t0 = time.monotonic()
        (probe,) = probe_connects([("open", f"http://127.0.0.1:{port}")], count=100_000, stop=stop.is_set)
    assert time.monotonic() - t0 < 5 and 0 < probe.attempts < 100_000 and probe.failures == {}


def test_stop_ends_a_connect_that_is_waiting() -> None:
    """A SYN dropped by a full accept queue leaves connect() waiting for seconds; Ctrl-C must not."""
    import threading
    import time

    with socket.socket() as listener, socket.socket() as filler:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)  # room for one connection, never accepted
        port = listener.getsockname()[1]
        filler.connect(("127.0.0.1", port))
        stop = threading.Event()
        threading.Timer(0.3, stop.set).start()
        t0 = time.monotonic()
        (probe,) = probe_connects([("full", f"http://127.0.0.1:{port}")], count=5, stop=stop.is_set)
        elapsed = time.monotonic() - t0
    assert elapsed < CONNECT_TIMEOUT_S * 0.5  # not the 4 s connect timeout
    assert probe.failures == {}  # the interrupted connect is not a failure


def test_resolve_addresses_includes_the_numeric_form() -> None:
    forms = resolve_addresses("http://localhost:8123/x")
    assert "localhost:8123" in forms and "127.0.0.1:8123" in forms


def test_connect_probes_against_a_listener_and_a_closed_port() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        port = listener.getsockname()[1]
        closed = free_port()
        probes = probe_connects(
            [("open", f"http://127.0.0.1:{port}"), ("closed", f"http://127.0.0.1:{closed}")], count=20
        )
    by_name = {p.name: p for p in probes}
    assert by_name["open"].attempts == 20 and by_name["open"].failures == {}
    assert by_name["open"].p50_ms is not None and by_name["open"].p50_ms < 100
    # a refusing port is given up after a few consecutive failures
    assert by_name["closed"].failures == {"connect_refused": 3} and by_name["closed"].p50_ms is None
    assert by_name["closed"].failure_rate == 1.0


@pytest.mark.integration
def test_health_and_counter_against_a_real_backend(tmp_path: Path) -> None:
    with backends(tmp_path, [{"latency_ms": 1}, {"health_status": 503}]) as (ok, sick):
        good = check_health(ok.url)
        bad = check_health(sick.url)
        custom = check_health(ok.url, ("/nope", "/stats"))
        assert read_counter(ok.url, "/stats") == 0
    assert good.healthy and good.status == 200 and good.url.endswith("/health")
    assert not bad.healthy and bad.status == 503
    assert custom.tried == ("/nope", "/stats") and custom.healthy  # 404 moves on to the next path
    nothing = check_health(f"http://127.0.0.1:{free_port()}")
    assert not nothing.healthy and nothing.status is None and nothing.error and nothing.tried == ("/health",)


def test_bandwidth_without_an_iperf3_server_is_a_value_not_a_crash() -> None:
    result = measure_bandwidth("127.0.0.1", port=free_port())
    assert result.mbits_per_s is None and result.reason


@pytest.mark.integration
def test_bandwidth_against_a_real_iperf3_server() -> None:
    import os
    import select
    import subprocess
    import time

    from infradoctor.procs import stop_process
    from tests.support.servers import require_binary

    binary = require_binary("iperf3")
    port = free_port()
    server = subprocess.Popen([binary, "-s", "-p", str(port), "-B", "127.0.0.1", "--forceflush"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        # wait for its banner, not with a probe connection (the server would take that as a test)
        assert server.stdout is not None
        banner = b""
        deadline = time.monotonic() + 10
        while b"listening" not in banner.lower() and time.monotonic() < deadline:
            ready, _, _ = select.select([server.stdout], [], [], 0.2)
            if ready:
                banner += os.read(server.stdout.fileno(), 4096)
        assert b"listening" in banner.lower(), banner
        result = measure_bandwidth("127.0.0.1", port=port, seconds=1)
    finally:
        stop_process(server, grace_s=2)
    assert result.reason is None and result.mbits_per_s is not None and result.mbits_per_s > 10
