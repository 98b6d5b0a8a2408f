"""What the rules see: :class:`LogsEvidence`, built from the parsers' :class:`LogStats` by :func:`build_evidence`.

Percentiles come from whole-millisecond histograms (exact at that resolution, linear interpolation between order
statistics, as numpy's default). Incidents are failure events of one signature and subject merged into time windows:
events less than :data:`INCIDENT_GAP_S` apart belong to the same window.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

from infradoctor.logs.signatures import BY_ID
from infradoctor.logs.stats import NO_TIME, UNKNOWN, LogStats
from infradoctor.redact import redact_text
from infradoctor.stats import histogram_quantile, histogram_sample

INCIDENT_GAP_S = 60
"""Failures of one kind and subject closer than this belong to one incident window."""
MAX_INCIDENTS = 200
"""Incidents kept in the result (largest first); the rest are counted."""
ERROR_STATUS = 500
"""Statuses at or above this count as errors (an attempt without a status, e.g. the client left first, does not)."""


def hist_quantile(hist: Mapping[int, int], q: float) -> float | None:
    """The q-quantile (0-1) of a millisecond histogram, the UNKNOWN key ignored; None when empty.

    See :func:`infradoctor.stats.histogram_quantile`.
    """
    return histogram_quantile(hist, q, exclude=UNKNOWN)


def hist_sample(hist: Mapping[int, int], limit: int = 5000) -> list[float]:
    """At most ``limit`` values with the histogram's distribution, the UNKNOWN key ignored.

    See :func:`infradoctor.stats.histogram_sample`.
    """
    return histogram_sample(hist, limit, exclude=UNKNOWN)


def iso(second: int | None) -> str | None:
    """``2026-11-29T10:00:00Z`` from an epoch second; None for None/NO_TIME."""
    if second is None or second == NO_TIME:
        return None
    return datetime.fromtimestamp(second, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def safe_line(line: str, limit: int = 300) -> str:
    """A log line fit to show: secrets redacted, control characters escaped, cut to ``limit`` characters."""
    text = redact_text(line[: limit * 2])
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class UpstreamStats:
    """One upstream's share of the traffic."""

    upstream: str
    """Address (nginx ``$upstream_addr``, Envoy ``%UPSTREAM_HOST%``) or ``backend/server`` (HAProxy)."""
    attempts: int
    """Requests sent to it (each retry counts)."""
    errors: int
    """Attempts that got a 5xx."""
    p50_ms: float | None
    """Median upstream time of its attempts."""
    p99_ms: float | None
    """99th percentile upstream time."""

    @property
    def error_rate(self) -> float:
        """Errors over attempts."""
        return self.errors / self.attempts if self.attempts else 0.0


@dataclass(frozen=True)
class Incident:
    """Failures of one signature at one subject within one time window."""

    signature: str
    """Signature id, e.g. ``upstream_timeout``."""
    code: str | None
    """Finding code the signature maps to."""
    subject: str
    """Upstream, GPU or source the failures point at (``-`` when unknown)."""
    start_s: int | None
    """Epoch second of the first failure, None when the lines carry no absolute time."""
    end_s: int | None
    """Epoch second of the last failure."""
    count: int
    """Failing lines in the window."""
    examples: tuple[str, ...] = ()
    """Example lines of this signature and subject (redacted, control characters escaped)."""
    source: str = ""
    """The file the lines come from (the same failure in an access and an error log is two incidents)."""

    def to_dict(self) -> dict[str, object]:
        """JSON form (times as ISO strings)."""
        return {
            "kind": self.signature,
            "code": self.code,
            "subject": self.subject,
            "start": iso(self.start_s),
            "end": iso(self.end_s),
            "duration_s": (self.end_s - self.start_s) if self.start_s is not None and self.end_s is not None else None,
            "count": self.count,
            "file": self.source,
            "examples": list(self.examples),
        }


@dataclass(frozen=True)
class LogsEvidence:
    """Everything the logs rules judge."""

    files: tuple[str, ...]
    """Files read."""
    lines: int
    """Lines seen."""
    requests: int
    """Access-log requests parsed."""
    request_errors: int
    """Requests answered 5xx."""
    request_p50_ms: float | None
    """Median request time as the router logged it."""
    request_p99_ms: float | None
    """99th percentile request time."""
    upstream_p50_ms: float | None
    """Median upstream time over all attempts."""
    upstream_p99_ms: float | None
    """99th percentile upstream time over all attempts."""
    overhead_samples: int
    """Single-attempt requests with both request and upstream time (the router-time split's base)."""
    overhead_p50_ms: float | None
    """Median of request time minus upstream time."""
    overhead_p99_ms: float | None
    """99th percentile of request time minus upstream time."""
    upstreams: tuple[UpstreamStats, ...]
    """Per-upstream table, busiest first."""
    attempts: Mapping[int, int]
    """Upstream attempts per request -> requests (empty when the format does not record attempts)."""
    incidents: tuple[Incident, ...]
    """Failure windows, largest first (at most MAX_INCIDENTS)."""
    incidents_dropped: int
    """Incidents beyond MAX_INCIDENTS."""
    signature_counts: Mapping[str, int]
    """Signature -> failing lines."""
    signature_durations: Mapping[str, Mapping[int, int]]
    """Signature -> histogram of request ms of its lines (where the line has a duration)."""
    success_hist: Mapping[int, int]
    """Request ms histogram of answered requests below 500 (client disconnects left out)."""
    queue_by_minute: tuple[tuple[int, int, float, int], ...]
    """HAProxy queue time per minute: (epoch minute, requests, mean Tw ms, max Tw ms), in time order."""
    xids: Mapping[tuple[int, str], int]
    """(Xid code, device) -> lines."""
    exceptions: Mapping[str, int]
    """Python exception type -> tracebacks ended by it."""
    upstream_hist: Mapping[int, int] = field(default_factory=dict)
    """Upstream ms histogram over all attempts."""
    request_hist: Mapping[int, int] = field(default_factory=dict)
    """Request ms histogram over all requests."""

    def incidents_of(self, *signatures: str) -> list[Incident]:
        """Incidents of the given signatures."""
        return [i for i in self.incidents if i.signature in signatures]


def build_evidence(stats: LogStats, files: tuple[str, ...]) -> LogsEvidence:
    """Reduce the parsers' statistics to evidence."""
    request_hist: Counter[int] = Counter()
    success_hist: Counter[int] = Counter()
    request_errors = 0
    for (status, ms), count in stats.request_hist.items():
        request_hist[ms] += count
        if status >= ERROR_STATUS:
            request_errors += count
        elif 100 <= status < 499:  # not client disconnects (nginx 499, Envoy 0) nor unknown
            success_hist[ms] += count
    upstream_hist: Counter[int] = Counter()
    per_upstream: dict[str, Counter[int]] = defaultdict(Counter)
    per_upstream_errors: Counter[str] = Counter()
    per_upstream_attempts: Counter[str] = Counter()
    for (upstream, status, ms), count in stats.attempt_hist.items():
        upstream_hist[ms] += count
        per_upstream[upstream][ms] += count
        per_upstream_attempts[upstream] += count
        if status >= ERROR_STATUS:
            per_upstream_errors[upstream] += count
    upstreams = tuple(
        UpstreamStats(
            upstream=name,
            attempts=per_upstream_attempts[name],
            errors=per_upstream_errors[name],
            p50_ms=hist_quantile(per_upstream[name], 0.5),
            p99_ms=hist_quantile(per_upstream[name], 0.99),
        )
        for name in sorted(per_upstream_attempts, key=lambda n: (-per_upstream_attempts[n], n))
    )
    incidents, dropped = _incidents(stats)
    signature_counts: Counter[str] = Counter()
    for (signature, _subject, _second, _source), count in stats.events.items():
        signature_counts[signature] += count
    durations: dict[str, Counter[int]] = defaultdict(Counter)
    for (signature, ms), count in stats.sig_durations.items():
        durations[signature][ms] += count
    queue = tuple(
        (minute, slot[0], slot[1] / slot[0] if slot[0] else 0.0, slot[2])
        for minute, slot in sorted(stats.queue.items())
    )
    return LogsEvidence(
        files=files,
        lines=stats.lines,
        requests=stats.requests,
        request_errors=request_errors,
        request_p50_ms=hist_quantile(request_hist, 0.5),
        request_p99_ms=hist_quantile(request_hist, 0.99),
        upstream_p50_ms=hist_quantile(upstream_hist, 0.5),
        upstream_p99_ms=hist_quantile(upstream_hist, 0.99),
        overhead_samples=sum(stats.overhead_hist.values()),
        overhead_p50_ms=hist_quantile(stats.overhead_hist, 0.5),
        overhead_p99_ms=hist_quantile(stats.overhead_hist, 0.99),
        upstreams=upstreams,
        attempts=dict(sorted(stats.attempts_hist.items())),
        incidents=incidents,
        incidents_dropped=dropped,
        signature_counts=dict(sorted(signature_counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        signature_durations={k: dict(v) for k, v in durations.items()},
        success_hist=dict(success_hist),
        queue_by_minute=queue,
        xids=dict(stats.xids),
        exceptions=dict(sorted(stats.exceptions.items(), key=lambda kv: (-kv[1], kv[0]))),
        upstream_hist=dict(upstream_hist),
        request_hist=dict(request_hist),
    )


def _incidents(stats: LogStats) -> tuple[tuple[Incident, ...], int]:
    seconds: dict[tuple[str, str, str], list[tuple[int, int]]] = defaultdict(list)
    for (signature, subject, second, source), count in stats.events.items():
        seconds[(signature, subject, source)].append((second, count))
    out: list[Incident] = []
    for (signature, subject, source), points in seconds.items():
        examples = tuple(safe_line(line) for line in stats.examples.get((signature, subject, source), ()))
        code = BY_ID[signature].code if signature in BY_ID else None
        untimed = sum(c for s, c in points if s == NO_TIME)
        if untimed:
            out.append(Incident(signature, code, subject, None, None, untimed, examples, source))
        timed = sorted((s, c) for s, c in points if s != NO_TIME)
        start = end = None
        total = 0
        for second, count in timed:
            if start is not None and end is not None and second - end > INCIDENT_GAP_S:
                out.append(Incident(signature, code, subject, start, end, total, examples, source))
                start, total = None, 0
            if start is None:
                start = second
            end = second
            total += count
        if start is not None:
            out.append(Incident(signature, code, subject, start, end, total, examples, source))
    out.sort(key=lambda i: (-i.count, i.start_s or 0, i.signature, i.subject, i.source))
    return tuple(out[:MAX_INCIDENTS]), max(0, len(out) - MAX_INCIDENTS)
