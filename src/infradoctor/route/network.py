"""Side probes of each path: TCP connect times, backend health endpoints, request counters, iperf3 bandwidth.

All bounded in count and time; anything that cannot be measured comes back as a value that says so.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import selectors
import shutil
import socket
import time
from collections import Counter
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from infradoctor.bounded import load_json, read_float
from infradoctor.load.taxonomy import connect_error_class
from infradoctor.procs import http_get, run_capture
from infradoctor.route.evidence import Bandwidth, ConnectProbe, HealthCheck
from infradoctor.route.stats import quantile
from infradoctor.telemetry import prometheus


def is_syn_retransmit(elapsed_s: float) -> bool:
    """True when a connect that took ``elapsed_s`` completed only after a SYN retransmission (~1 s or ~3 s)."""
    low, high = SYN_RETRANSMIT_SLACK_S
    return any(at + low <= elapsed_s <= at + high for at in SYN_RETRANSMIT_S)

HEALTH_PATHS = ("/health", "/healthz", "/ready", "/v1/models")
"""Health paths tried in order when ``--health-path`` is not given."""

CONNECT_TIMEOUT_S = 4.0
"""Timeout of one TCP connect probe: past Linux's SYN retransmits at 1 s and 3 s, so that a connect that needed
a retransmit completes (and is counted as one) instead of failing."""

SYN_RETRANSMIT_S = (1.0, 3.0)
"""When a connect whose SYN (or SYN-ACK) was lost completes: after the first and the second retransmission (Linux's
initial RTO of 1 s, doubled)."""

SYN_RETRANSMIT_SLACK_S = (-0.05, 0.3)
"""A connect that took a retransmission time plus this window (s) counts as completed after a SYN retransmit."""

CONNECT_INTERVAL_S = 0.01
"""Pause after each round of connects (one to every endpoint), so the probes do not overflow a small accept
queue (a single-threaded server's backlog of 5) and cause the SYN drops they would then report."""

STOP_POLL_S = 0.05
"""How often a connect in progress checks the stop signal (s)."""

CONNECT_GIVE_UP_AFTER = 3
"""Consecutive failed connects after which a target is not probed further."""

HTTP_TIMEOUT_S = 3.0
"""Deadline of a whole health or counter request (connect, headers, body): a peer trickling bytes is cut off."""

MAX_COUNTER_BYTES = 1_000_000
"""Bytes of a counter answer read."""

MAX_COUNT = 1e15
"""A larger request count is not one."""

IPERF_SECONDS = 2
"""Length of one iperf3 measurement."""

IPERF_RETRY_DELAY_S = 1.0
"""Pause before the one retry when the iperf3 server was busy with another test."""


def host_port(url: str) -> tuple[str, int]:
    """Host and port of an http(s) URL (default ports filled in)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.hostname or "", port


def base_url(url: str) -> str:
    """``scheme://host:port`` of a URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def resolve_addresses(url: str) -> frozenset[str]:
    """``host:port`` spellings of a URL's endpoint: as written, and every address the name resolves to."""
    host, port = host_port(url)
    forms = {f"{host.lower()}:{port}"}
    with contextlib.suppress(OSError, UnicodeError):
        for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            address = str(info[4][0])
            forms.add(f"[{address}]:{port}" if ":" in address else f"{address}:{port}")
    return frozenset(forms)


class _Stopped(Exception):
    """The stop signal came while a connect was in progress."""


def connect_ms(
    host: str,
    port: int,
    *,
    timeout_s: float = CONNECT_TIMEOUT_S,
    stop: Callable[[], bool] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Milliseconds to open (and close) a TCP connection to ``host:port``, name resolution not included.

    Tries each resolved address in turn, like :func:`socket.create_connection`. Raises OSError (TimeoutError after
    ``timeout_s``); checks ``stop`` every ``STOP_POLL_S`` while waiting and raises ``_Stopped`` when it is set.
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        selector = selectors.DefaultSelector()
        try:
            sock.setblocking(False)
            start = clock()
            deadline = start + timeout_s
            code = sock.connect_ex(address)
            selector.register(sock, selectors.EVENT_WRITE)
            while code in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
                if stop is not None and stop():
                    raise _Stopped
                remaining = deadline - clock()
                if remaining <= 0:
                    raise TimeoutError(f"connect to {host}:{port} timed out after {timeout_s:g} s")
                if selector.select(min(STOP_POLL_S, remaining)):
                    code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                raise OSError(code, os.strerror(code))
            return (clock() - start) * 1000.0
        except OSError as exc:
            error = exc
        finally:
            selector.close()
            sock.close()
    raise error


def probe_connects(
    targets: Sequence[tuple[str, str]],
    *,
    count: int = 50,
    timeout_s: float = CONNECT_TIMEOUT_S,
    interval_s: float = CONNECT_INTERVAL_S,
    stop: Callable[[], bool] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> list[ConnectProbe]:
    """``count`` TCP connects to each ``(name, url)``, interleaved round-robin so that drift hits all of them.

    Rounds are ``interval_s`` apart; ``stop`` is checked before every connect (Ctrl-C ends the probes, keeping
    what was measured). A connect that completed after a SYN retransmission (~1 s, ~3 s) is a success, counted
    in ``syn_retransmits``; failures are refusals, timeouts and other errors only.
    """
    times: dict[str, list[float]] = {name: [] for name, _ in targets}
    failures: dict[str, Counter[str]] = {name: Counter() for name, _ in targets}
    attempts: dict[str, int] = dict.fromkeys(times, 0)
    streak: dict[str, int] = dict.fromkeys(times, 0)
    retransmits: dict[str, list[float]] = {name: [] for name, _ in targets}
    stopped = False
    for round_no in range(max(0, count)):
        if round_no and interval_s > 0 and not stopped:
            sleep(interval_s)
        for name, url in targets:
            if stop is not None and stop():
                stopped = True
                break
            if streak[name] >= CONNECT_GIVE_UP_AFTER:
                continue
            host, port = host_port(url)
            try:
                elapsed = connect_ms(host, port, timeout_s=timeout_s, stop=stop, clock=clock)
            except _Stopped:
                stopped = True
                break
            except OSError as exc:
                attempts[name] += 1
                failures[name][connect_error_class(exc)] += 1
                streak[name] += 1
                continue
            attempts[name] += 1
            streak[name] = 0
            times[name].append(elapsed)
            if is_syn_retransmit(elapsed / 1000.0):
                retransmits[name].append(elapsed)
        if stopped:
            break
    out: list[ConnectProbe] = []
    for name, url in targets:
        ordered = sorted(times[name])
        host, port = host_port(url)
        out.append(
            ConnectProbe(
                name=name,
                address=f"{host}:{port}",
                attempts=attempts[name],
                failures=dict(failures[name]),
                p50_ms=quantile(ordered, 0.5),
                p99_ms=quantile(ordered, 0.99),
                syn_retransmits=len(retransmits[name]),
                syn_retransmit_ms=tuple(round(v, 1) for v in retransmits[name]),
            )
        )
    return out


def _get(url: str, timeout_s: float) -> tuple[int | None, bytes, float, str | None]:
    """Status, body, latency (ms) and error of a GET."""
    answer = http_get(url, timeout_s, max_body=MAX_COUNTER_BYTES)
    return answer.status, answer.body, answer.latency_ms, answer.error


def check_health(
    backend_url: str, paths: Sequence[str] = HEALTH_PATHS, *, timeout_s: float = HTTP_TIMEOUT_S
) -> HealthCheck:
    """Ask a backend's health paths in order; the first that answers other than 404/405 decides."""
    base = base_url(backend_url)
    tried: list[str] = []
    last = HealthCheck(url=base + paths[0], status=None, healthy=False, latency_ms=None, error="not asked")
    for path in paths:
        url = base + (path if path.startswith("/") else "/" + path)
        tried.append(path)
        status, _, latency, error = _get(url, timeout_s)
        last = HealthCheck(
            url=url,
            status=status,
            healthy=status is not None and 200 <= status < 300,
            latency_ms=latency,
            error=error,
            tried=tuple(tried),
        )
        if status is None:
            break  # nothing answers at all: other paths will not either
        if status not in (404, 405):
            return last
    return last


def parse_counter(body: bytes) -> int | None:
    """A request count from a counter endpoint; None when the answer holds no finite, non-negative count.

    Accepts a bare number, a JSON object with ``requests``/``requests_total``/``count``/``total``, or Prometheus
    text whose ``*_requests_total`` samples are summed. ``inf``, ``1e999``, NaN, negative or 400-digit values
    are not counts (the bounded readers refuse them).
    """
    text = body[:MAX_COUNTER_BYTES].decode("utf-8", errors="replace").strip()
    if not text:
        return None
    bare = read_float(text, low=0, high=MAX_COUNT)
    if bare is not None:
        return int(bare)
    if text.startswith(("{", "[")):
        try:
            data = load_json(text)
        except ValueError:
            return None
        if isinstance(data, dict):
            for key in ("requests", "requests_total", "count", "total"):
                value = read_float(data.get(key), low=0, high=MAX_COUNT)
                if value is not None:
                    return int(value)
        return None
    samples = prometheus.parse(text)
    values = [s.value for name in samples.names() if name.endswith("_requests_total") for s in samples.get(name)]
    if not values or any(v < 0 for v in values) or sum(values) > MAX_COUNT:
        return None
    return int(sum(values))


def read_counter(backend_url: str, path: str, *, timeout_s: float = HTTP_TIMEOUT_S) -> int | None:
    """The backend's request counter at ``path``, or None when it cannot be read."""
    status, body, _, _ = _get(base_url(backend_url) + (path if path.startswith("/") else "/" + path), timeout_s)
    return parse_counter(body) if status is not None and 200 <= status < 300 else None


def measure_bandwidth(host: str, *, port: int = 5201, seconds: int = IPERF_SECONDS) -> Bandwidth:
    """iperf3 throughput to ``host`` where an iperf3 server answers; otherwise a value that says why not.

    No TCP pre-check: an iperf3 server serves one client at a time and takes any connection as a test.
    """
    binary = shutil.which("iperf3")
    if binary is None:
        return Bandwidth(host, None, "iperf3 is not installed")
    result = _iperf_once(binary, host, port, seconds)
    reason = result.reason or ""
    if result.mbits_per_s is None and ("busy" in reason or "reset" in reason):
        time.sleep(IPERF_RETRY_DELAY_S)  # the server runs one test at a time: try once more when it was busy
        result = _iperf_once(binary, host, port, seconds)
    return result


def _iperf_once(binary: str, host: str, port: int, seconds: int) -> Bandwidth:
    connect_ms = str(int(CONNECT_TIMEOUT_S * 1000))
    proc = run_capture([binary, "-c", host, "-p", str(port), "-t", str(seconds), "-J", "--connect-timeout",
                        connect_ms], timeout=seconds + 15)
    if proc.error is not None:
        return Bandwidth(host, None, f"iperf3 failed: {proc.error}")
    try:
        data = json.loads(proc.stdout or b"{}")
    except ValueError as exc:
        return Bandwidth(host, None, f"iperf3 failed: {exc}")
    bps = data.get("end", {}).get("sum_received", {}).get("bits_per_second") if isinstance(data, dict) else None
    if not isinstance(bps, (int, float)) or data.get("error"):
        error = data.get("error", "no result") if isinstance(data, dict) else "no result"
        return Bandwidth(host, None, f"no iperf3 server answered on {host}:{port} ({error})")
    return Bandwidth(host, float(bps) / 1e6)
