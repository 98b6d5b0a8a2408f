"""What the rules see: :class:`LogsEvidence`, built from the parsers' :class:`LogStats` by :func:`build_evidence`.

Percentiles come from whole-millisecond histograms (exact at that resolution; the nearest-rank quantile of
:mod:`infradoctor.stats`), each with the number of values behind it. Request latency is taken over the requests an
upstream answered (the router's own replies, Envoy ``UH``/``NR``/``UO`` with duration 0 or nginx's "no live
upstreams", are not latency samples); when the format does not say which those are, over every timed request.

Incidents are failure events of one signature and subject merged into time windows: events less than
:data:`INCIDENT_GAP_S` apart belong to the same window, whichever file they come from, so the same failure in an
access log (the request) and an error log (the message) is one incident. Its ``count`` is the lines; its
``failures`` the larger of the two channels (the access log's requests, the messages), since each failure is written
once in each.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

from infradoctor.logs.signatures import BY_ID
from infradoctor.logs.stats import MAX_EPOCH, MESSAGE, NO_TIME, REQUEST, UNKNOWN, LogStats
from infradoctor.redact import redact_text
from infradoctor.stats import histogram_quantile, histogram_sample

INCIDENT_GAP_S = 60
"""Failures of one kind and subject closer than this belong to one incident window."""
MAX_INCIDENTS = 200
"""Incidents kept in the result (largest first); the rest are counted."""
ERROR_STATUS = 500
"""Statuses at or above this count as errors (an attempt without a status, e.g. the client left first, does not)."""
NO_UPSTREAM = "-"
"""The upstream of attempts whose address the format does not log (counted in the upstream percentiles, not listed
as an upstream)."""


def hist_quantile(hist: Mapping[int, int], q: float) -> float | None:
    """The q-quantile (0-1) of a millisecond histogram, the UNKNOWN key ignored; None when empty.

    See :func:`infradoctor.stats.histogram_quantile`.
    """
    return histogram_quantile(hist, q, exclude=UNKNOWN)


def hist_count(hist: Mapping[int, int]) -> int:
    """Values behind a histogram's percentiles (the UNKNOWN key left out)."""
    return sum(n for ms, n in hist.items() if ms != UNKNOWN)


def hist_sample(hist: Mapping[int, int], limit: int = 5000) -> list[float]:
    """At most ``limit`` values with the histogram's distribution, the UNKNOWN key ignored.

    See :func:`infradoctor.stats.histogram_sample`.
    """
    return histogram_sample(hist, limit, exclude=UNKNOWN)


def iso(second: int | None) -> str | None:
    """``2026-11-29T10:00:00Z`` from an epoch second; None for None/NO_TIME or a time out of range."""
    if second is None or second == NO_TIME or not 0 <= second <= MAX_EPOCH:
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
    timed: int = 0
    """Attempts with an upstream time (the n behind its percentiles)."""

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
    """The file with most of its lines."""
    sources: tuple[str, ...] = ()
    """Every file with lines in it (an access log and an error log about the same failures are one incident)."""
    requests: int = 0
    """Lines that are access-log requests."""
    messages: int = 0
    """Lines that are messages (error log, app log, kernel)."""

    @property
    def failures(self) -> int:
        """Failures in the window: each is a request line, a message, or both (so the larger of the two)."""
        return max(self.requests, self.messages) or self.count

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
            "failures": self.failures,
            "file": self.source,
            "files": list(self.sources),
            "examples": list(self.examples),
        }


@dataclass(frozen=True)
class XidLines:
    """The Xid lines of one code, as the logs showed them."""

    code: int
    """Xid number."""
    count: int
    """Lines of this code (an Xid 45 that names another code as its cause counts under that code's ``followed``)."""
    devices: tuple[str, ...]
    """Devices (``PCI:0000:3b:00``, ``unknown`` when redacted) of its lines."""
    action: str | None
    """The most disruptive action its lines called for (None when only Xid 45 lines named it as their cause)."""
    example: str
    """The message of its first line."""
    followed: Mapping[int, int] = field(default_factory=dict)
    """Code -> lines that name this code as their cause (``Xid 45 ... caused by previous Xid 149``)."""
    followed_devices: tuple[str, ...] = ()
    """Devices of those lines."""
    without_xid: int = 0
    """"fallen off the bus" messages printed without an Xid line (counted here as Xid 79)."""


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
    """Median request time as the router logged it, over :attr:`request_population`."""
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
    """Per-upstream table, busiest first (attempts without an address are not an upstream)."""
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
    """Request ms histogram of answered requests below 500 (client disconnects and the router's own replies left
    out)."""
    queue_by_minute: tuple[tuple[int, int, float, int], ...]
    """HAProxy queue time per minute: (epoch minute, requests, mean Tw ms, max Tw ms), in time order."""
    xids: Mapping[tuple[int, str], int]
    """(Xid code, device) -> lines."""
    exceptions: Mapping[str, int]
    """Python exception type -> tracebacks ended by it."""
    upstream_hist: Mapping[int, int] = field(default_factory=dict)
    """Upstream ms histogram over all attempts."""
    request_hist: Mapping[int, int] = field(default_factory=dict)
    """Request ms histogram over :attr:`request_population`."""
    request_population: str = "timed requests"
    """Which requests the request percentiles are over: ``requests answered by an upstream`` or ``timed requests``
    (the format does not tell the router's own replies apart)."""
    request_latency_n: int = 0
    """Requests behind the request percentiles."""
    upstream_latency_n: int = 0
    """Upstream attempts behind the upstream percentiles."""
    success_n: int = 0
    """Requests behind :attr:`success_hist`."""
    xid_codes: tuple[XidLines, ...] = ()
    """Xid lines by code, the causes they name linked (see :class:`XidLines`)."""
    envoy_flags: Mapping[str, int] = field(default_factory=dict)
    """Envoy response flag -> requests carrying it."""
    haproxy_states: Mapping[str, int] = field(default_factory=dict)
    """HAProxy termination state -> requests."""
    line_formats: Mapping[str, int] = field(default_factory=dict)
    """Format -> lines it read."""

    def incidents_of(self, *signatures: str) -> list[Incident]:
        """Incidents of the given signatures."""
        return [i for i in self.incidents if i.signature in signatures]


def build_evidence(stats: LogStats, files: tuple[str, ...]) -> LogsEvidence:
    """Reduce the parsers' statistics to evidence."""
    all_hist: Counter[int] = Counter()
    served_hist: Counter[int] = Counter()
    success_all: Counter[int] = Counter()
    success_served: Counter[int] = Counter()
    request_errors = 0
    for (status, ms, served), count in stats.request_hist.items():
        all_hist[ms] += count
        if served:
            served_hist[ms] += count
        if status >= ERROR_STATUS:
            request_errors += count
        elif 100 <= status < 499:  # not client disconnects (nginx 499, Envoy 0) nor unknown
            success_all[ms] += count
            if served:
                success_served[ms] += count
    if hist_count(served_hist):
        request_hist, population, success_hist = served_hist, "requests answered by an upstream", success_served
    else:
        request_hist, population, success_hist = all_hist, "timed requests", success_all
    upstream_hist: Counter[int] = Counter()
    per_upstream: dict[str, Counter[int]] = defaultdict(Counter)
    per_upstream_errors: Counter[str] = Counter()
    per_upstream_attempts: Counter[str] = Counter()
    for (upstream, status, ms), count in stats.attempt_hist.items():
        upstream_hist[ms] += count
        if upstream == NO_UPSTREAM:
            continue
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
            timed=hist_count(per_upstream[name]),
        )
        for name in sorted(per_upstream_attempts, key=lambda n: (-per_upstream_attempts[n], n))
    )
    incidents, dropped = _incidents(stats)
    signature_counts: Counter[str] = Counter()
    for (signature, _subject, _second, _source, _channel), count in stats.events.items():
        signature_counts[signature] += count
    durations: dict[str, Counter[int]] = defaultdict(Counter)
    for (signature, ms), count in stats.sig_durations.items():
        durations[signature][ms] += count
    queue = tuple(
        (minute, slot[0], slot[1] / slot[0] if slot[0] else 0.0, slot[2])
        for minute, slot in sorted(stats.queue.items())
    )
    xids: Counter[tuple[int, str]] = Counter()
    for (code, device, _cause), count in stats.xids.items():
        xids[(code, device)] += count
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
        xids=dict(xids),
        exceptions=dict(sorted(stats.exceptions.items(), key=lambda kv: (-kv[1], kv[0]))),
        upstream_hist=dict(upstream_hist),
        request_hist=dict(request_hist),
        request_population=population,
        request_latency_n=hist_count(request_hist),
        upstream_latency_n=hist_count(upstream_hist),
        success_n=hist_count(success_hist),
        xid_codes=_xid_codes(stats),
        envoy_flags=dict(sorted(stats.envoy_flags.items(), key=lambda kv: (-kv[1], kv[0]))),
        haproxy_states=dict(sorted(stats.haproxy_states.items(), key=lambda kv: (-kv[1], kv[0]))),
        line_formats=dict(sorted(stats.line_formats.items(), key=lambda kv: (-kv[1], kv[0]))),
    )


def _xid_codes(stats: LogStats) -> tuple[XidLines, ...]:
    """Xid lines per code; an Xid 45 that names its cause is listed under that cause (which may have no line)."""
    counts: Counter[int] = Counter()
    devices: dict[int, set[str]] = defaultdict(set)
    followed: dict[int, Counter[int]] = defaultdict(Counter)
    followed_devices: dict[int, set[str]] = defaultdict(set)
    for (code, device, cause), count in stats.xids.items():
        if cause and cause != code:
            followed[cause][code] += count
            followed_devices[cause].add(device)
        else:
            counts[code] += count
            devices[code].add(device)
    bus = sum(stats.bus_drops.values())
    out = []
    for code in sorted(set(counts) | set(followed)):
        out.append(XidLines(
            code=code, count=counts.get(code, 0), devices=tuple(sorted(devices.get(code, ()))),
            action=stats.xid_actions.get(code) if counts.get(code) else None,
            example=stats.xid_examples.get(code, ""), followed=dict(followed.get(code, {})),
            followed_devices=tuple(sorted(followed_devices.get(code, ()))),
            without_xid=bus if code == 79 else 0,
        ))
    return tuple(out)


def _incidents(stats: LogStats) -> tuple[tuple[Incident, ...], int]:
    points: dict[tuple[str, str], list[tuple[int, int, str, str]]] = defaultdict(list)
    for (signature, subject, second, source, channel), count in stats.events.items():
        points[(signature, subject)].append((second, count, source, channel))
    out: list[Incident] = []
    for (signature, subject), items in points.items():
        code = BY_ID[signature].code if signature in BY_ID else None
        untimed = [p for p in items if p[0] == NO_TIME]
        if untimed:
            out.append(_window(signature, code, subject, None, None, untimed, stats))
        timed = sorted(p for p in items if p[0] != NO_TIME)
        window: list[tuple[int, int, str, str]] = []
        for point in timed:
            if window and point[0] - window[-1][0] > INCIDENT_GAP_S:
                out.append(_window(signature, code, subject, window[0][0], window[-1][0], window, stats))
                window = []
            window.append(point)
        if window:
            out.append(_window(signature, code, subject, window[0][0], window[-1][0], window, stats))
    out.sort(key=lambda i: (-i.count, i.start_s or 0, i.signature, i.subject, i.source))
    return tuple(out[:MAX_INCIDENTS]), max(0, len(out) - MAX_INCIDENTS)


def _window(signature: str, code: str | None, subject: str, start: int | None, end: int | None,
            points: list[tuple[int, int, str, str]], stats: LogStats) -> Incident:
    by_source: Counter[str] = Counter()
    channels: Counter[str] = Counter()
    for _second, count, source, channel in points:
        by_source[source] += count
        channels[channel] += count
    sources = tuple(sorted(by_source, key=lambda s: (-by_source[s], s)))
    examples: list[str] = []
    for source in sources:
        examples += [safe_line(line) for line in stats.examples.get((signature, subject, source), ())]
    return Incident(signature, code, subject, start, end, sum(by_source.values()), tuple(examples[:3]),
                    sources[0], sources, channels[REQUEST], channels[MESSAGE])
