"""Sampling routers' and model servers' statistics on their own thread, bounded in time and count.

:class:`Sampler` reads every target once at start (the caller may wait for it, at most ``timeout_s``), then
every ``interval_s`` on a daemon thread, and once more at :meth:`Sampler.stop`. Each read is one bounded GET
(:func:`infradoctor.procs.http_get`: a whole-request deadline, at most :data:`MAX_BODY_BYTES` read), or one
command on HAProxy's runtime API (``unix:///run/haproxy.sock`` or ``tcp://host:port``: ``show stat`` and ``show
servers state``). A target that is missing, slow, huge or answers nonsense gives readings with a ``problem`` and
never holds up the measurement: the thread only ever waits on its own reads, and :meth:`Sampler.stop` waits at
most one read's deadline for it.

A router given by its admin origin alone (``http://127.0.0.1:9901``) is asked the usual paths in turn
(:data:`ROUTER_PATHS`) until one answers with statistics; once Envoy is recognised, ``/clusters?format=json`` is
read beside its stats for the hosts' health flags and names.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

from infradoctor.procs import http_get
from infradoctor.telemetry.router import ENVOY_STATS, RouterSnapshot, parse_router_stats
from infradoctor.telemetry.server import ServerSnapshot, parse_server_metrics

ENVOY_STATS_PATH = "/stats?format=json&filter=" + quote(
    r"^cluster\..*\.(" + "|".join(re.escape(stat) for stat in sorted(ENVOY_STATS))
    + r")$|^http\..*\.downstream_rq_total$", safe="")
"""Envoy's JSON stats, only the cluster stats that are read and the requests clients sent (Envoy's ``filter`` is a
regex over stat names): a mesh's admin answers megabytes of stats otherwise."""

MAX_BODY_BYTES = 8_000_000
"""Bytes read from one stats answer; a longer one is cut (and the reading says so)."""

DEFAULT_INTERVAL_S = 1.0
"""Seconds between reads."""

DEFAULT_TIMEOUT_S = 1.0
"""Deadline of one read (connect, headers and body)."""

FAILED_BACKOFF_MAX = 8
"""A target whose reads keep failing is read every 2nd, 4th, ... up to every 8th tick (its cost stays bounded)."""

MAX_READINGS = 3600
"""Readings kept per target; past that every other one is dropped and the interval doubles."""

ROUTER_PATHS = (ENVOY_STATS_PATH, "/stats/prometheus", "/metrics", "/;csv", "/stats;csv", "/stub_status",
                "/nginx_status")
"""Paths tried on a router URL without a path, in order (Envoy admin, Prometheus, HAProxy stats, nginx)."""

ROUTER = "router"
"""``Target.role`` of a router's statistics."""
SERVER = "server"
"""``Target.role`` of a model server's metrics."""


@dataclass(frozen=True)
class Reading:
    """One read of one target."""

    at_s: float
    """When the read completed, seconds since the sampler started."""
    latency_ms: float
    """How long the read took."""
    router: RouterSnapshot | None = None
    """What a router answered (role ``router``)."""
    server: ServerSnapshot | None = None
    """What a model server answered (role ``server``)."""
    error: str | None = None
    """Why nothing usable came back (unreachable, timed out, an error status, not statistics), or None."""


@dataclass(frozen=True)
class Target:
    """Something to sample."""

    url: str
    """As the user gave it."""
    role: str
    """``router`` or ``server``."""


def _runtime_api(url: str, command: str, timeout_s: float) -> tuple[bytes, str | None]:
    """One command on HAProxy's runtime API (unix or TCP socket); the answer (bounded) and an error."""
    parts = urlsplit(url)
    deadline = time.perf_counter() + timeout_s
    try:
        if parts.scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address: str | tuple[str, int] = parts.path
        else:
            sock = socket.socket(socket.AF_INET6 if ":" in (parts.hostname or "") else socket.AF_INET)
            address = (parts.hostname or "127.0.0.1", parts.port or 9999)
    except (OSError, ValueError) as exc:
        return b"", f"{type(exc).__name__}: {exc}"
    chunks: list[bytes] = []
    size = 0
    try:
        sock.settimeout(timeout_s)
        sock.connect(address)
        sock.sendall(command.encode() + b"\n")
        while size < MAX_BODY_BYTES:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return b"".join(chunks), f"timed out after {timeout_s:g} s"
            sock.settimeout(remaining)
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        return b"".join(chunks), f"{type(exc).__name__}: {exc}"[:200]
    finally:
        sock.close()
    return b"".join(chunks), None


class Sampler:
    """Reads targets before, during (every ``interval_s``) and after a measurement, on its own thread."""

    def __init__(
        self,
        targets: Sequence[Target],
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        clock: Callable[[], float] = time.perf_counter,
        max_readings: int = MAX_READINGS,
    ) -> None:
        self.targets = tuple(targets)
        self.interval_s = max(0.05, interval_s)
        self.timeout_s = max(0.05, timeout_s)
        self.clock = clock
        self.max_readings = max(2, max_readings)
        self.readings: dict[str, list[Reading]] = {t.url: [] for t in self.targets}
        """Readings per target URL, in time order."""
        self.marks: list[tuple[float, str]] = []
        """``(at_s, label)`` boundaries the caller set (e.g. the end of each load point)."""
        self._resolved: dict[str, tuple[str, ...]] = {}
        self._streak: dict[str, int] = {t.url: 0 for t in self.targets}
        self._tick = 0
        self.cpu_s = 0.0
        """CPU seconds the sampling thread spent reading and parsing (its cost to the process it runs in)."""
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._t0 = clock()

    def now(self) -> float:
        """Seconds since the sampler was made."""
        return self.clock() - self._t0

    def mark(self, label: str) -> None:
        """Record a boundary (the caller's clock, the sampler's time base)."""
        with self._lock:
            self.marks.append((self.now(), label))

    def start(self, *, wait_first: bool = True) -> None:
        """Start the thread; with ``wait_first``, wait (at most one read deadline per target) for the first reads."""
        if self._thread is not None or not self.targets:
            return
        self._thread = threading.Thread(target=self._loop, name="infradoctor-telemetry", daemon=True)
        self._thread.start()
        if wait_first:
            self._first.wait(self.timeout_s * len(self.targets) * 2 + 0.5)

    def stop(self) -> dict[str, list[Reading]]:
        """Stop the thread (waiting at most one read deadline per target), read once more, return the readings."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(self.timeout_s * len(self.targets) * 2 + 0.5)
            if not self._thread.is_alive():
                self.read_all()
        return self.readings

    def _loop(self) -> None:
        next_at = self.clock()
        first = True
        while not self._stop.is_set():
            cpu = time.thread_time()
            self.read_all(every=first)
            self.cpu_s += time.thread_time() - cpu
            first = False
            self._first.set()
            next_at += self.interval_s
            wait = next_at - self.clock()
            if wait < 0:
                next_at = self.clock()  # a slow read: start the next one now, never a burst to catch up
                wait = 0.0
            if self._stop.wait(wait):
                break

    def read_all(self, *, every: bool = True) -> None:
        """Read every target once (sequentially, each bounded by ``timeout_s``).

        With ``every=False`` (the thread's ticks), a target whose last reads failed is skipped on some ticks.
        """
        self._tick += 1
        for target in self.targets:
            streak = self._streak[target.url]
            if not every and streak and self._tick % min(FAILED_BACKOFF_MAX, 2**streak):
                continue
            start = self.clock()
            if target.role == ROUTER:
                router, error = self._read_router(target.url)
                reading = Reading(self.now(), (self.clock() - start) * 1000.0, router=router, error=error)
            else:
                server, error = self._read_server(target.url)
                reading = Reading(self.now(), (self.clock() - start) * 1000.0, server=server, error=error)
            failed = reading.router is None and reading.server is None
            self._streak[target.url] = min(self._streak[target.url] + 1, 8) if failed else 0
            with self._lock:
                readings = self.readings[target.url]
                readings.append(reading)
                if len(readings) > self.max_readings:
                    del readings[1:-1:2]  # keep first and last, thin the middle
                    self.interval_s *= 2

    def _get(self, url: str) -> tuple[bytes, str | None, str | None]:
        answer = http_get(url, self.timeout_s, max_body=MAX_BODY_BYTES)
        if answer.status is None:
            return b"", answer.error or "no answer", None
        if not 200 <= answer.status < 300:
            return b"", f"HTTP {answer.status} from {url}", None
        note = f"answer cut at {MAX_BODY_BYTES} bytes" if answer.truncated else None
        return answer.body, note, answer.content_type

    def _read_router(self, url: str) -> tuple[RouterSnapshot | None, str | None]:
        parts = urlsplit(url)
        if parts.scheme in ("unix", "tcp"):
            body, error = _runtime_api(url, "show stat", self.timeout_s)
            if error is not None and not body:
                return None, error
            snap = parse_router_stats(body, url)
            state, _ = _runtime_api(url, "show servers state", self.timeout_s)
            if state:
                snap = _with_addresses(snap, parse_router_stats(state, url))
            usable = snap.kind != "unknown" and bool(snap.values or snap.hosts)
            return (snap, snap.problem) if usable else (None, snap.problem or "no statistics in the answer")
        candidates = self._resolved.get(url)
        if candidates is None:
            if parts.path not in ("", "/") or parts.query:
                candidates = (url,)
            else:
                origin = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
                candidates = tuple(origin + p for p in ROUTER_PATHS)
        last_error: str | None = None
        for candidate in candidates:
            body, note, _ = self._get(candidate)
            if not body:
                last_error = note
                if len(candidates) > 1 and note and ("refused" in note or "timed out" in note):
                    break  # nothing listens (or it hangs): other paths will not do better
                continue
            snap = parse_router_stats(body, candidate)
            if snap.kind == "unknown" or not (snap.values or snap.hosts):
                last_error = snap.problem or "no statistics in the answer"
                continue
            if snap.kind == "envoy" and snap.format == "envoy-json":
                p = urlsplit(candidate)
                clusters_url = urlunsplit((p.scheme, p.netloc, "/clusters", "format=json", ""))
                cbody, cnote, _ = self._get(clusters_url)
                if cbody:
                    snap = snap.merged(parse_router_stats(cbody, clusters_url))
                elif cnote:
                    note = note or f"/clusters: {cnote}"
            self._resolved[url] = (candidate,)
            if note:
                snap = RouterSnapshot(snap.kind, snap.source, snap.values, snap.limits, snap.hosts, snap.format,
                                      note)
            return snap, snap.problem
        return None, last_error or "no statistics found"

    def _read_server(self, url: str) -> tuple[ServerSnapshot | None, str | None]:
        parts = urlsplit(url)
        target = url if parts.path not in ("", "/") else urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))
        body, note, _ = self._get(target)
        if not body:
            return None, note
        snap = parse_server_metrics(body, target)
        if snap.kind == "unknown":
            return None, snap.problem
        return snap, note or snap.problem


def _with_addresses(stats: RouterSnapshot, state: RouterSnapshot) -> RouterSnapshot:
    """HAProxy ``show stat`` rows given the addresses ``show servers state`` names (older CSVs have no ``addr``)."""
    if not state.hosts:
        return stats
    by_name = {(h.group, h.name): h.address for h in state.hosts}
    hosts = tuple(
        h if h.address else type(h)(h.name, by_name.get((h.group, h.name)), h.group, h.state, h.flags, h.counters)
        for h in stats.hosts
    )
    return RouterSnapshot(stats.kind, stats.source, stats.values, stats.limits, hosts, stats.format, stats.problem)


def sampler_for(
    router_stats: Sequence[str],
    server_metrics: Sequence[str],
    *,
    interval_s: float = DEFAULT_INTERVAL_S,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Sampler | None:
    """A sampler over ``--router-stats`` and ``--server-metrics`` URLs, or None when none was given."""
    targets = [Target(u, ROUTER) for u in router_stats] + [Target(u, SERVER) for u in server_metrics]
    return Sampler(targets, interval_s=interval_s, timeout_s=timeout_s) if targets else None
