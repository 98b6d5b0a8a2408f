"""Hand-built samples and evidence for rule and analysis tests (seeded, no I/O)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from infradoctor.route.analysis import BackendTarget, ProbeRun, address_of, analyze
from infradoctor.route.evidence import DIRECT, ROUTER, HealthCheck, RouteEvidence, Sample

ROUTER_URL = "http://lb.test:8080/predict"
B1 = "http://10.0.0.1:8000"
B2 = "http://10.0.0.2:8000"
B3 = "http://10.0.0.3:8000"


@dataclass
class BackendSpec:
    """How a synthetic backend behaves."""

    url: str
    latency_ms: float = 10.0
    jitter_ms: float = 1.0
    error_rate: float = 0.0
    error: str = "http_500"
    down: bool = False
    cold_ms: float = 0.0
    cold_requests: int = 0
    weight: float = 1.0
    router_extra_ms: float = 0.0


@dataclass
class Scenario:
    """A synthetic run: backends, a router adding ``router_ms``, optional timeout and retries."""

    backends: Sequence[BackendSpec]
    router_ms: float = 0.5
    router_timeout_ms: float | None = None
    requests_per_path: int = 300
    header: str | None = "x-upstream-addr"
    retry_on_error: bool = False
    attempt_header: bool = False
    seed: int = 0
    health: Mapping[str, HealthCheck] = field(default_factory=dict)


def samples(sc: Scenario) -> ProbeRun:
    rng = random.Random(sc.seed)
    out: list[Sample] = []
    clock = 0.0
    weights = [b.weight for b in sc.backends]
    served_count = {b.url: 0 for b in sc.backends}

    def backend_latency(b: BackendSpec) -> tuple[float, str | None]:
        served_count[b.url] += 1
        lat = max(0.05, rng.gauss(b.latency_ms, b.jitter_ms))
        if served_count[b.url] <= b.cold_requests:
            lat += b.cold_ms
        if rng.random() < b.error_rate:
            return lat, b.error
        return lat, None

    for i in range(sc.requests_per_path):
        # routed request
        clock += 0.001
        live = [b for b in sc.backends if not b.down]
        backend = rng.choices(live, weights=[b.weight for b in live])[0] if live else None
        attempts = 1
        if backend is None:
            out.append(Sample(ROUTER, ROUTER, i, clock, 1.0, 502, "http_502"))
        else:
            lat, err = backend_latency(backend)
            served = [backend]
            if err and sc.retry_on_error:
                other = next(b for b in live if b is not backend)
                lat2, err = backend_latency(other)
                lat += lat2
                served.append(other)
                attempts = 2
            total = lat + sc.router_ms + backend.router_extra_ms
            status: int | None = 200 if err is None else int(err.split("_")[1])
            if sc.router_timeout_ms is not None and total > sc.router_timeout_ms:
                total, status, err = sc.router_timeout_ms + rng.uniform(0, 2), 504, "http_504"
            value = ", ".join(address_of(b.url) for b in served)
            out.append(
                Sample(
                    ROUTER, ROUTER, i, clock, total, status, err,
                    served_by=value if sc.header else None,
                    attempts=(attempts if sc.attempt_header else len(served)) if sc.header else None,
                )
            )
        for b in sc.backends:
            clock += 0.001
            if b.down:
                out.append(Sample(b.url, DIRECT, i, clock, 0.1, None, "connect_refused"))
                continue
            lat, err = backend_latency(b)
            status = 200 if err is None else int(err.split("_")[1])
            out.append(Sample(b.url, DIRECT, i, clock, lat, status, err))
    _ = weights
    return ProbeRun(
        samples=tuple(out),
        header=sc.header,
        duration_s=clock,
        attempt_header="x-envoy-attempt-count" if sc.attempt_header else None,
    )


def evidence(sc: Scenario, **kwargs: object) -> RouteEvidence:
    targets = [BackendTarget(b.url, frozenset({address_of(b.url)})) for b in sc.backends]
    return analyze(
        samples(sc),
        router_url=ROUTER_URL,
        targets=targets,
        health=sc.health,
        **kwargs,  # type: ignore[arg-type]
    )


def healthy(url: str) -> HealthCheck:
    return HealthCheck(url=url + "/health", status=200, healthy=True, latency_ms=1.0, tried=("/health",))
