"""The interleaved prober: the same requests through the router and straight to each backend, alternating in time.

Time is cut into slots. In a router slot the router carries its ``concurrency`` keep-alive connections, each
sending ``per_worker`` requests one after another; in the next slot every backend is loaded directly at once, each
with the share of the routed concurrency one backend gets through the router (``infradoctor route`` sets that),
the same requests per connection, so slots last alike and each backend carries the same load on both paths. Slots
alternate (router, backends, router, backends, ...): slow drift on the host (other processes, thermal, GC) hits
both sides alike, and only one path loads a backend at a time. The backends run together in their slot because
they do so behind the router: backends that share a host (one node with several model servers, or loopback in a
test) compete for its CPU in a router slot, and a direct slot that loaded them one by one would hand that
contention to the router as "overhead". A path whose last slot could not connect at all gets a single request
per slot (after a pause of ``UNREACHABLE_BACKOFF_S`` when nothing else in its slot answers), until it answers
again, so a dead backend neither eats the run in connect timeouts nor gets flooded with connects; when every path
has been unreachable for ``ALL_UNREACHABLE_GIVE_UP_S`` the probe ends early.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from infradoctor.route.analysis import CONNECT_ERROR_CLASSES, ProbeRun, parse_upstream_value
from infradoctor.route.evidence import DIRECT, ROUTER, Sample

UPSTREAM_HEADERS = ("x-upstream-addr", "x-served-by", "x-backend", "x-envoy-upstream-host")
"""Response headers that may name the backend that served a routed request, in the order they are tried."""

ATTEMPT_HEADERS = ("x-envoy-attempt-count",)
"""Response headers that carry the router's upstream attempt count."""

UNREACHABLE_BACKOFF_S = 0.1
"""Pause before each slot of a path whose last slot could not connect at all (a refused connect returns at once:
without it a dead path would get thousands of connects per second)."""

WAKEUP_PROBE_S = 0.005
"""Sleep of the wake-up probe: how late the prober wakes from it measures the host's CPU contention."""

MAX_WAKEUPS = 4000
"""Wake-up delays kept (the probe stops recording beyond; a run at 5 ms steps reaches it after 20 s)."""

ALL_UNREACHABLE_GIVE_UP_S = 3.0
"""The probe ends early once every path has been unreachable (connect errors only) for this long."""


@dataclass(frozen=True)
class Exchange:
    """One request's outcome, as a path sender reports it."""

    status: int | None
    """HTTP status, None when no response arrived."""
    error: str | None
    """Error class, None for success."""
    latency_ms: float
    """Send to complete response (or error), ms."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Captured response headers, lower-case names."""


class Sender(Protocol):
    """Sends the request on one path over one keep-alive connection (reconnecting when needed)."""

    async def send(self) -> Exchange:
        """Send one request and wait for its outcome (never raises for network errors)."""
        ...

    async def close(self) -> None:
        """Close the connection."""
        ...


@dataclass(frozen=True)
class ProbePath:
    """A path to probe."""

    name: str
    """``router`` or the backend URL."""
    kind: str
    """``router`` or ``direct``."""
    url: str
    """Full request URL on this path (base URL plus the request path)."""
    concurrency: int | None = None
    """Connections on this path while it is active; None for the plan's."""
    per_worker: int | None = None
    """Requests per connection per slot on this path; None for the plan's."""


@dataclass(frozen=True)
class ProbePlan:
    """How long and how hard to probe."""

    concurrency: int = 4
    """Connections (in-flight requests) on the active path."""
    per_worker: int = 2
    """Requests each connection sends per slot."""
    duration_s: float = 10.0
    """Stop starting slots after this long."""
    max_requests: int = 100_000
    """Stop starting slots after this many requests in all."""
    backend_header: str | None = None
    """Header that names the serving backend (lower-case); None to auto-detect."""
    stop: Callable[[], bool] | None = None
    """Checked between slots: when it returns True the probe ends early (Ctrl-C), keeping what was measured."""
    progress: Callable[[float, int, int], None] | None = None
    """Called after each slot with (seconds so far, routed requests, direct requests): a live progress line."""


def schedule(paths: Sequence[ProbePath]) -> list[tuple[ProbePath, ...]]:
    """One round of slots: the router alone, then every backend directly at once."""
    router = tuple(p for p in paths if p.kind == ROUTER)
    direct = tuple(p for p in paths if p.kind == DIRECT)
    return [group for group in (router[:1], direct) if group]


def upstream_of(headers: Mapping[str, str], wanted: str | None) -> tuple[str | None, str | None, int | None]:
    """``(header name, raw value, attempts)`` naming the upstream in a routed response."""
    attempts: int | None = None
    for name in ATTEMPT_HEADERS:
        value = headers.get(name)
        if value is not None:
            try:
                attempts = int(value.split(",")[-1].strip())
            except ValueError:
                attempts = None
    for name in (wanted,) if wanted else UPSTREAM_HEADERS:
        value = headers.get(name) if name else None
        if value:
            if attempts is None:
                attempts = parse_upstream_value(value)[1] or None
            return name, value, attempts
    return None, None, attempts


async def run_probe(
    paths: Sequence[ProbePath],
    plan: ProbePlan,
    make_sender: Callable[[str], Sender],
    *,
    clock: Callable[[], float] = time.perf_counter,
    opened: Callable[[Sender], int] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> ProbeRun:
    """Probe ``paths`` in alternating slots until the plan's duration or request budget is spent."""
    senders: dict[str, list[Sender]] = {
        p.name: [make_sender(p.url) for _ in range(p.concurrency or plan.concurrency)] for p in paths
    }
    samples: list[Sample] = []
    seq: dict[str, int] = {p.name: 0 for p in paths}
    header_counts: dict[str, int] = {}
    attempt_header: str | None = None
    wanted = plan.backend_header.lower() if plan.backend_header else None
    start = clock()
    order = schedule(paths)

    unreachable: set[str] = set()
    wakeups: list[float] = []

    async def wakeup_probe() -> None:
        while len(wakeups) < MAX_WAKEUPS:
            before = time.perf_counter()
            await asyncio.sleep(WAKEUP_PROBE_S)
            wakeups.append(max(0.0, (time.perf_counter() - before - WAKEUP_PROBE_S) * 1000.0))

    probe_task = asyncio.get_running_loop().create_task(wakeup_probe())

    async def worker(path: ProbePath, sender: Sender, requests: int) -> None:
        nonlocal attempt_header
        for _ in range(requests):
            sent = clock() - start
            exchange = await sender.send()
            served_by = attempts = None
            if path.kind == ROUTER:
                name, served_by, attempts = upstream_of(exchange.headers, wanted)
                if name:
                    header_counts[name] = header_counts.get(name, 0) + 1
                if any(h in exchange.headers for h in ATTEMPT_HEADERS):
                    attempt_header = next(h for h in ATTEMPT_HEADERS if h in exchange.headers)
            samples.append(
                Sample(
                    path=path.name,
                    kind=path.kind,
                    seq=seq[path.name],
                    started_s=sent,
                    latency_ms=exchange.latency_ms,
                    status=exchange.status,
                    error=exchange.error,
                    served_by=served_by,
                    attempts=attempts,
                )
            )
            seq[path.name] += 1

    all_unreachable_since: float | None = None
    gave_up = False

    def should_stop() -> bool:
        return (
            clock() - start >= plan.duration_s
            or len(samples) >= plan.max_requests
            or (plan.stop is not None and plan.stop())
        )

    try:
        done = should_stop()
        while not done and order:
            for group in order:
                before = len(samples)
                if all(p.name in unreachable for p in group):  # nothing here answers: pause, do not flood
                    await sleep(UNREACHABLE_BACKOFF_S)
                jobs = []
                for path in group:
                    if path.name in unreachable:  # one request per slot keeps watching without flooding or waiting
                        jobs.append(worker(path, senders[path.name][0], 1))
                    else:
                        requests = path.per_worker or plan.per_worker
                        jobs.extend(worker(path, sender, requests) for sender in senders[path.name])
                await asyncio.gather(*jobs)
                for path in group:
                    mine = [x for x in samples[before:] if x.path == path.name]
                    if mine and all(x.error in CONNECT_ERROR_CLASSES for x in mine):
                        unreachable.add(path.name)
                    elif mine:
                        unreachable.discard(path.name)
                if len(unreachable) < len(paths):
                    all_unreachable_since = None
                elif all_unreachable_since is None:
                    all_unreachable_since = clock()
                elif clock() - all_unreachable_since >= ALL_UNREACHABLE_GIVE_UP_S:
                    gave_up = done = True
                    break
                if plan.progress is not None:
                    routed = sum(1 for x in samples if x.kind == ROUTER)
                    plan.progress(clock() - start, routed, len(samples) - routed)
                if should_stop():
                    done = True
                    break
    finally:
        probe_task.cancel()
        for pool in senders.values():
            for sender in pool:
                await sender.close()
    connections = {name: sum(opened(s) for s in pool) for name, pool in senders.items()} if opened else {}
    header = max(header_counts, key=lambda h: header_counts[h]) if header_counts else None
    return ProbeRun(
        samples=tuple(sorted(samples, key=lambda s: s.started_s)),
        header=header,
        duration_s=clock() - start,
        connections=connections,
        attempt_header=attempt_header,
        gave_up=gave_up,
        wakeup_delay_ms=tuple(round(w, 4) for w in wakeups),
    )
