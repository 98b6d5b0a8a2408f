"""Child processes and loopback ports: start, wait until ready (bounded), stop (SIGINT, SIGTERM, SIGKILL)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class HttpAnswer:
    """What a GET got back."""

    status: int | None
    """HTTP status, or None when nothing answered."""
    body: bytes
    """Up to ``max_body`` bytes of the response's body (error statuses included)."""
    latency_ms: float
    """Time from the request to the answer (or the failure)."""
    error: str | None
    """Why nothing answered (``timed out after 1 s``, ``ConnectionRefusedError: ...``, a protocol error), or None."""
    truncated: bool = False
    """True when the body was longer than ``max_body`` and was cut there."""
    content_type: str | None = None
    """The response's Content-Type, when it sent one."""


HTTP_MAX_HEADERS = 100
"""Header lines a response may carry (http.client's own limit; more is a protocol error, not a crash)."""


def http_get(
    url: str, timeout: float = 1.0, *, max_body: int = 0, headers: Mapping[str, str] | None = None
) -> HttpAnswer:
    """A GET that never raises and never outlives ``timeout``: status, the start of the body, latency, failure.

    ``timeout`` bounds the whole exchange (connect, headers and body), not each read: a peer trickling a byte a
    second is cut off at the deadline (a watchdog shuts the socket down), a peer answering garbage or more than
    :data:`HTTP_MAX_HEADERS` headers is a protocol error in ``error``. At most ``max_body`` bytes are read (0: none).
    Proxies from the environment are not used: probes go straight to the address given.
    """
    import http.client
    import threading
    from urllib.parse import urlsplit

    start = time.perf_counter()

    def answer(status: int | None, body: bytes = b"", error: str | None = None, **extra: object) -> HttpAnswer:
        return HttpAnswer(status, body, (time.perf_counter() - start) * 1000.0, error, **extra)  # type: ignore[arg-type]

    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        return answer(None, error=f"ValueError: {exc}")
    if parts.scheme not in ("http", "https") or not host:
        return answer(None, error=f"ValueError: not an http(s) URL: {url[:200]!r}")
    timeout = max(0.001, float(timeout))
    conn_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_class(host, port, timeout=timeout)
    expired = threading.Event()

    def watchdog() -> None:
        expired.set()
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(timeout, watchdog)
    timer.daemon = True
    timer.start()
    try:
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("GET", target, headers=dict(headers or {}))
        response = conn.getresponse()
        body = b""
        truncated = False
        if max_body > 0:
            body = response.read(max_body)
            truncated = len(body) == max_body and bool(response.read(1))
        if expired.is_set():
            raise TimeoutError
        return answer(int(response.status), body, None, truncated=truncated,
                      content_type=response.getheader("Content-Type"))
    except Exception as exc:  # noqa: BLE001 - a probe of a hostile peer reports every failure as a reason
        if expired.is_set() or isinstance(exc, (TimeoutError, socket.timeout)):
            return answer(None, error=f"timed out after {timeout:g} s")
        reason = getattr(exc, "reason", exc)
        text = str(reason)[:200]
        return answer(None, error=f"{type(reason).__name__}: {text}")
    finally:
        timer.cancel()
        with contextlib.suppress(Exception):
            conn.close()


def http_status(url: str, timeout: float = 1.0) -> int | None:
    """HTTP status of a GET, or None when nothing answered."""
    return http_get(url, timeout).status


def wait_until(
    ready: Callable[[], bool],
    *,
    timeout: float,
    interval: float = 0.05,
    alive: Callable[[], bool] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Poll ``ready`` until it is true (True), ``alive`` turns false, or ``timeout`` passes (False)."""
    deadline = clock() + timeout
    while clock() < deadline:
        if ready():
            return True
        if alive is not None and not alive():
            return False
        sleep(interval)
    return ready()


def wait_for_http(url: str, *, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """Wait until ``url`` answers with any HTTP status (bounded); False if the process died or time ran out."""
    return wait_until(
        lambda: http_status(url, timeout=0.5) is not None,
        timeout=timeout,
        interval=0.1,
        alive=(lambda: proc.poll() is None) if proc is not None else None,
    )


def stop_process(
    proc: subprocess.Popen[bytes],
    *,
    grace_s: float = 5.0,
    group: bool = False,
    poll: Callable[[], int | None] | None = None,
    before_signal: Callable[[signal.Signals], None] | None = None,
) -> int | None:
    """Stop a child: SIGINT, then SIGTERM, then SIGKILL, each after ``grace_s``; returns its exit code.

    ``group`` signals the child's whole process group (the child was started with ``start_new_session``), so
    that what it forked stops too. ``poll`` replaces ``proc.poll`` (a caller that records the exit itself);
    ``before_signal`` runs before each signal is sent.
    """
    check = poll or proc.poll
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if check() is not None:
            break
        if before_signal is not None:
            before_signal(sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        deadline = time.monotonic() + (grace_s if sig != signal.SIGKILL else 10.0)
        while time.monotonic() < deadline and check() is None:
            time.sleep(0.02)
    return check()


@dataclass(frozen=True)
class Captured:
    """What a command printed and how it ended (:func:`run_capture`)."""

    returncode: int | None
    """Its exit status; None when it could not be run or ran out of time."""
    stdout: bytes
    """Standard output (empty when it did not run)."""
    stderr: bytes
    """Standard error."""
    error: str | None = None
    """Why it did not run to the end: ``not installed``, ``timed out after N s``, an OSError; else None."""

    @property
    def ok(self) -> bool:
        """True when it ran and exited 0."""
        return self.returncode == 0

    def reason(self) -> str:
        """One line on why it failed (for notes): the error, or the exit status with the first stderr line."""
        if self.error:
            return self.error
        lines = (self.stderr or self.stdout).decode("utf-8", "replace").strip().splitlines()
        return f"exit {self.returncode}: {lines[0] if lines else 'no output'}"


def run_capture(argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None) -> Captured:
    """Run a command to the end with a deadline and capture its output; never raises."""
    try:
        proc = subprocess.run(  # noqa: S603 - argv built by the caller from fixed parts
            list(argv), capture_output=True, timeout=timeout, check=False, env=dict(env) if env is not None else None
        )
    except FileNotFoundError:
        return Captured(None, b"", b"", "not installed")
    except subprocess.TimeoutExpired as exc:
        return Captured(None, exc.stdout or b"", exc.stderr or b"", f"timed out after {timeout:g} s")
    except OSError as exc:
        return Captured(None, b"", b"", f"{type(exc).__name__}: {exc}")
    return Captured(proc.returncode, proc.stdout, proc.stderr)
