"""The logs command's typed metrics (``Result.metrics`` of ``infradoctor logs``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from infradoctor.metrics import Metrics


@dataclass(frozen=True)
class LogsHeadline(Metrics):
    """The totals, with the number of values behind each percentile."""

    lines: int
    """Lines seen, in every file (skipped ones included)."""
    requests: int = 0
    """Access-log requests parsed."""
    structured_lines: int = 0
    """Lines a structured format read (access, error, JSON, kernel lines); the rest were searched as free text."""
    error_rate: float | None = None
    """Share of requests answered 5xx (None without requests)."""
    request_p50_ms: float | None = None
    """Median request time, over ``request_population``."""
    request_p99_ms: float | None = None
    """99th percentile request time, over ``request_population``."""
    request_latency_n: int = 0
    """Requests behind the request percentiles."""
    request_population: str = ""
    """Which requests they are: ``requests answered by an upstream`` (the router's own replies such as Envoy UH/NR or
    nginx's "no live upstreams" left out) or ``timed requests`` (the format does not tell them apart)."""
    upstream_p50_ms: float | None = None
    """Median upstream time over all attempts."""
    upstream_p99_ms: float | None = None
    """99th percentile upstream time over all attempts."""
    upstream_latency_n: int = 0
    """Upstream attempts behind the upstream percentiles."""
    router_overhead_p99_ms: float | None = None
    """99th percentile of the router's own time (request minus upstream time)."""
    router_time_n: int = 0
    """Single-attempt requests behind the router-time percentiles."""
    incidents: int = 0
    """Failure windows (kept and dropped)."""
    failing_lines: int = 0
    """Lines with a failure signature (a line with two counts under each)."""
    skipped_lines: int = 0
    """Lines not used (binary, too long, not in the format forced with ``--format``)."""
    parse_mb_per_s: float | None = None
    """Input read per second of wall time, imports excluded (None when too fast to measure)."""


@dataclass(frozen=True)
class FileRow(Metrics):
    """One input file."""

    file: str
    """The path as given (``<stdin>`` for standard input)."""
    format: str | None = None
    """The format that read most of its first lines (None when the file could not be opened)."""
    lines: int = 0
    """Lines in it."""
    parsed: int = 0
    """Lines a format read (free text included in ``--format auto``)."""
    bytes: int = 0
    """Bytes read (decompressed)."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Lines not used, by reason."""
    formats: dict[str, int] = field(default_factory=dict)
    """Format -> lines it read (a mixed file lists several; ``text`` is free text searched for signatures)."""
    envelopes: dict[str, int] = field(default_factory=dict)
    """Envelope (kubectl-prefix, stern, compose, cri, docker-json, syslog, ...) -> lines it wrapped."""
    engine: str | None = None
    """``polars`` or ``python``."""
    seconds: float | None = None
    """Time spent reading it."""
    sniff_share: float | None = None
    """Share of its first lines the chosen format read."""
    error: str | None = None
    """Why it is not measured: ``not_found``, ``empty``, ``read_error``, ``format_mismatch``... (None when it is)."""


@dataclass(frozen=True)
class IncidentRow(Metrics):
    """Failures of one kind at one subject within one time window."""

    kind: str
    """Signature id (``upstream_timeout``...)."""
    code: str | None
    """The finding code it maps to (None for signatures that are counted, not findings)."""
    subject: str
    """The upstream, GPU or source it points at."""
    start: str | None
    """ISO time of the first failure (None when the lines carry no time)."""
    end: str | None
    """ISO time of the last failure."""
    duration_s: int | None
    """Seconds from first to last."""
    count: int
    """Lines in the window."""
    failures: int
    """Failures: a failure in an access and an error log is two lines, one failure."""
    file: str
    """The file with most of its lines."""
    files: tuple[str, ...] = ()
    """Every file with lines in it."""
    examples: tuple[str, ...] = ()
    """Example lines, redacted, control characters escaped."""


@dataclass(frozen=True)
class KindRow(Metrics):
    """One signature seen."""

    code: str | None
    """Its finding code."""
    count: int
    """Lines."""
    meaning: str
    """What it means."""
    fix: str
    """What to change."""


@dataclass(frozen=True)
class UpstreamRow(Metrics):
    """One upstream (per attempt; retries count)."""

    upstream: str
    """Address or ``backend/server``."""
    requests: int
    """Attempts sent to it."""
    errors: int
    """Attempts answered 5xx."""
    error_rate: float
    """Errors over attempts."""
    p50_ms: float | None = None
    """Median upstream time."""
    p99_ms: float | None = None
    """99th percentile upstream time."""
    timed: int = 0
    """Attempts with a time (the n behind the percentiles)."""


@dataclass(frozen=True)
class RouterSplit(Metrics):
    """Router versus upstream time."""

    requests: int = 0
    """Single-attempt requests with both times (the n behind the router's percentiles)."""
    router_p50_ms: float | None = None
    """Median router time (request minus upstream)."""
    router_p99_ms: float | None = None
    """99th percentile router time."""
    upstream_p50_ms: float | None = None
    """Median upstream time."""
    upstream_p99_ms: float | None = None
    """99th percentile upstream time."""
    upstream_n: int = 0
    """Attempts behind the upstream percentiles."""
    request_p50_ms: float | None = None
    """Median request time."""
    request_p99_ms: float | None = None
    """99th percentile request time."""
    request_n: int = 0
    """Requests behind the request percentiles."""


@dataclass(frozen=True)
class TimelinePoint(Metrics):
    """One time bucket."""

    t: str | None
    """ISO start of the bucket."""
    total: int
    """Lines in it."""
    status: dict[str, int] = field(default_factory=dict)
    """Status class (``2xx``... or ``log`` for messages) -> lines."""
    kinds: dict[str, int] = field(default_factory=dict)
    """Signature -> failing lines."""


@dataclass(frozen=True)
class Timeline(Metrics):
    """Lines over time."""

    bucket_s: int = 60
    """Seconds per bucket (a multiple of 60, so that there are at most 1440 buckets)."""
    points: tuple[TimelinePoint, ...] = ()
    """Buckets in time order."""


@dataclass(frozen=True)
class QueueMinute(Metrics):
    """HAProxy queue time (Tw) in one minute."""

    minute: str | None
    """ISO start of the minute."""
    requests: int
    """Requests in it."""
    mean_ms: float
    """Mean Tw."""
    max_ms: int
    """Largest Tw."""


@dataclass(frozen=True)
class XidRow(Metrics):
    """Xid lines of one code on one device."""

    code: int
    """Xid number."""
    device: str
    """``PCI:0000:3b:00`` (``unknown`` when the log redacted it)."""
    count: int
    """Lines."""
    meaning: str
    """What the code means (the table in ``infradoctor.xid``, shared with ``node``)."""
    action: str
    """What it calls for."""
    advice: str
    """What to do."""
    caused_by: int | None = None
    """The code these lines name as their cause (Xid 45: "caused by previous Xid N")."""


@dataclass(frozen=True)
class ParseStats(Metrics):
    """How the files were read."""

    bytes: int = 0
    """Bytes read (decompressed)."""
    seconds: float = 0.0
    """Wall time."""
    cpu_seconds: float = 0.0
    """CPU time (all threads)."""
    mb_per_s: float | None = None
    """MB per wall second."""
    mb_per_cpu_s: float | None = None
    """MB per CPU second."""
    engines: dict[str, int] = field(default_factory=dict)
    """Engine -> files."""
    formats: dict[str, int] = field(default_factory=dict)
    """Primary format -> files."""
    line_formats: dict[str, int] = field(default_factory=dict)
    """Format -> lines it read, over all files."""
    envelopes: dict[str, int] = field(default_factory=dict)
    """Envelope -> lines it wrapped, over all files."""


@dataclass(frozen=True)
class LogsMetrics(Metrics):
    """Metrics of ``infradoctor logs``."""

    command: ClassVar[str] = "logs"

    headline: LogsHeadline
    """The totals."""
    files: tuple[FileRow, ...] = ()
    """One row per input file."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Lines (and files, ``file_*``) not used, by reason."""
    notes: dict[str, int] = field(default_factory=dict)
    """Lines used with a caveat (``invalid_utf8``, ``truncated_last_line``, ``field_cut``, ``line_cut``...)."""
    upstreams: tuple[UpstreamRow, ...] = ()
    """Per-upstream table, busiest first."""
    incidents: tuple[IncidentRow, ...] = ()
    """Failure windows, largest first."""
    incidents_dropped: int = 0
    """Windows beyond the kept limit."""
    kinds: dict[str, KindRow] = field(default_factory=dict)
    """Signature -> what it is and how often."""
    timeline: Timeline = Timeline()
    """Lines per time bucket by status class and failure kind."""
    router_split: RouterSplit = RouterSplit()
    """Router versus upstream time."""
    attempts: dict[str, int] = field(default_factory=dict)
    """Upstream attempts per request -> requests."""
    queue: tuple[QueueMinute, ...] = ()
    """HAProxy queue time per minute."""
    xid: tuple[XidRow, ...] = ()
    """GPU Xid lines per code and device."""
    exceptions: dict[str, int] = field(default_factory=dict)
    """Python exception type -> tracebacks it ended."""
    envoy_flags: dict[str, int] = field(default_factory=dict)
    """Envoy response flag -> requests carrying it (``UF,URX`` counts under both)."""
    haproxy_states: dict[str, int] = field(default_factory=dict)
    """HAProxy termination state -> requests."""
    parse: ParseStats = ParseStats()
    """How the files were read."""
    distributions: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """``upstream_latency_ms`` and ``request_latency_ms``: at most 5000 evenly ranked values each (deterministic)."""
