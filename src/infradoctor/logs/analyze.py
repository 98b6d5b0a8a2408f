"""``run(options) -> Result``: read every file, sniff its format, parse, build evidence, run rules.

Files that cannot be read (missing, directories, no permission, empty) and lines that cannot be used are counted
and reported as error notes; they never stop the run. A file that yields no parsed line because it could not be read
(a truncated ``.gz``) or because no line is in the format forced with ``--format`` gets ``error`` in its
``metrics.files`` row: it is not measured. ``-`` reads standard input.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO

from infradoctor.findings import rank_findings, run_rules
from infradoctor.logs.evidence import LogsEvidence, build_evidence, hist_sample, iso
from infradoctor.logs.formats import ParseOptions, choose, parse_source
from infradoctor.logs.formats.access import POLARS_REQUIREMENT
from infradoctor.logs.incidents import LogsRuleOptions
from infradoctor.logs.metrics import (
    FileRow,
    IncidentRow,
    KindRow,
    LogsHeadline,
    LogsMetrics,
    ParseStats,
    QueueMinute,
    RouterSplit,
    Timeline,
    TimelinePoint,
    UpstreamRow,
    XidRow,
)
from infradoctor.logs.signatures import BY_ID
from infradoctor.logs.source import SourceError, open_source, read_sample
from infradoctor.logs.stats import LogStats
from infradoctor.result import ErrorNote, Result, new_result, utc_now_iso
from infradoctor.xid import UNKNOWN_DEVICE, xid_info

STDIN = "-"
"""The path that means standard input."""
STDIN_NAME = "<stdin>"
"""How standard input is named in the result."""
SPOOL_CHUNK_BYTES = 1 << 20
"""Bytes copied at a time when spooling standard input."""
READ_ERRORS = ("read_error", "unreadable")
"""Skip reasons that mean the file's bytes could not be read (damaged or truncated compression, I/O errors)."""
MAX_TIMELINE_POINTS = 1440
"""The timeline is coarsened (bucket a multiple of 60 s) to at most this many points."""
DISTRIBUTION_LIMIT = 5000
"""Values kept per distribution in ``metrics.distributions``."""


@dataclass(frozen=True)
class LogsOptions:
    """What ``infradoctor logs`` was asked to do."""

    files: tuple[str, ...] = ()
    """The log files (``-`` reads standard input)."""
    format: str = "auto"
    """``--format``: auto or one format for every file."""
    nginx_log_format: str | None = None
    """``--nginx-log-format``: the nginx ``log_format`` string of the access logs."""
    envoy_log_format: str | None = None
    """``--envoy-log-format``: the Envoy access-log format string (default and Istio formats are known)."""
    engine: str = "auto"
    """Access-log engine: auto, polars or python."""
    rules: LogsRuleOptions = field(default_factory=LogsRuleOptions)
    """Rule options."""
    router_stats_dumps: tuple[str, ...] = ()
    """``--router-stats-dump``: saved router statistics answers, judged by the router rules (R003, R005, R009,
    R010, R013) as a window from the router's start to the dump; their findings join the logs' findings."""


def run(
    options: LogsOptions,
    *,
    stdin: BinaryIO | None = None,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.process_time,
    now: Callable[[], str] = utc_now_iso,
) -> Result:
    """The library entry of ``infradoctor logs``: analyse ``options.files`` and return the result.

    ``stdin`` is read for a file named ``-`` (default ``sys.stdin.buffer``). Nothing is printed or stored.

    Raises:
        FormatError: ``--nginx-log-format`` or ``--envoy-log-format`` does not compile (a usage error).
    """
    return analyze_logs(options.files, options, clock=clock, cpu_clock=cpu_clock, now=now, stdin=stdin)


def analyze_logs(
    paths: Sequence[Path | str],
    options: LogsOptions | None = None,
    *,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.process_time,
    now: Callable[[], str] = utc_now_iso,
    stdin: BinaryIO | None = None,
) -> Result:
    """Analyse the log files and return the ``logs`` result (``paths`` instead of ``options.files``).

    A path ``-`` reads standard input (``stdin`` when given, else ``sys.stdin.buffer``), shown as ``<stdin>``.

    Raises:
        FormatError: ``--nginx-log-format`` does not compile (a usage error).
    """
    opts = options or LogsOptions()
    started_at = now()
    start = clock()
    cpu_start = cpu_clock()
    stats = LogStats()
    parse_options = ParseOptions(engine=opts.engine)
    file_rows: list[FileRow] = []
    errors: list[ErrorNote] = []
    with contextlib.ExitStack() as cleanup:
        for raw in paths:
            path, name = Path(raw), str(raw)
            if name == STDIN:
                path, name = cleanup.enter_context(spool_stdin(stdin)), STDIN_NAME
            file_rows.append(_analyze_file(path, name, opts, parse_options, stats, errors, clock))
    if stats.fast_engine_missing:
        errors.append(ErrorNote("logs.engine", "the fast access-log engine (polars) is not installed; large access "
                                "logs were parsed by the pure-Python engine, about 2-3x slower: "
                                f"pip install '{POLARS_REQUIREMENT}'"))
    for row in file_rows:
        errors += [ErrorNote(f"logs:skipped:{reason}", f"{row.file}: lines skipped ({reason.replace('_', ' ')})",
                             count) for reason, count in sorted(row.skipped.items())]
    errors += [ErrorNote(f"logs:{reason}", f"lines used with a caveat: {reason.replace('_', ' ')}", count)
               for reason, count in sorted(stats.notes.items())]
    errors += [ErrorNote("logs:read", message) for message in stats.messages]
    evidence = build_evidence(stats, tuple(str(p) for p in paths))
    findings = run_rules(evidence, opts.rules)
    dumps = None
    if opts.router_stats_dumps:
        from infradoctor.telemetry.dumps import read_dumps

        dumps = read_dumps(opts.router_stats_dumps)
        findings = rank_findings([*findings, *dumps.findings])
        errors += [ErrorNote("logs.router-stats-dump", note) for note in dumps.notes]
    duration = clock() - start
    metrics = build_metrics(evidence, stats, file_rows, duration, cpu_clock() - cpu_start)
    return new_result(
        "logs",
        started_at=started_at,
        duration_s=duration,
        target={"files": [str(p) for p in paths], "format": opts.format,
                **({"nginx_log_format": opts.nginx_log_format} if opts.nginx_log_format else {}),
                **({"envoy_log_format": opts.envoy_log_format} if opts.envoy_log_format else {}),
                **({"router_stats_dumps": [{"file": f, "kind": k} for f, k in dumps.kinds.items()]} if dumps else {})},
        metrics=metrics.to_dict(),
        findings=findings,
        errors=errors,
    )


def _analyze_file(path: Path, name: str, opts: LogsOptions, parse_options: ParseOptions, stats: LogStats,
                  errors: list[ErrorNote], clock: Callable[[], float]) -> FileRow:
    """Parse one file into ``stats``; its ``metrics.files`` row (``error`` set when nothing could be measured)."""
    try:
        source = open_source(path, name)
    except SourceError as exc:
        stats.skip(f"file_{exc.reason}", 1)
        errors.append(ErrorNote(f"logs:{exc.reason}", str(exc)))
        return FileRow(file=name, error=exc.reason)
    if source.size_bytes == 0:
        errors.append(ErrorNote("logs:empty", f"{source.name}: empty file"))
        return FileRow(file=name, error="empty")
    sample = read_sample(source)
    choice = choose(opts.format, sample, nginx_log_format=opts.nginx_log_format,
                    envoy_log_format=opts.envoy_log_format, year=_file_year(path))
    before = (stats.lines, stats.parsed, stats.bytes, Counter(stats.skipped))
    file_start = clock()
    report = parse_source(source, choice, stats, parse_options)
    seconds = round(clock() - file_start, 4)
    lines, parsed = stats.lines - before[0], stats.parsed - before[1]
    skipped = dict(stats.skipped - before[3])
    primary = choice.primary.name
    if not choice.forced and report.formats:
        primary = max(report.formats, key=lambda f: (report.formats[f], f == choice.primary.name))
    stats.formats[primary] += 1
    if not sample:
        errors.append(ErrorNote("logs:no_text", f"{source.name}: no text lines at the start (binary?)"))
    error = None
    if parsed == 0:
        read_errors = sum(skipped.get(reason, 0) for reason in READ_ERRORS)
        if read_errors:
            error = "read_error"
            errors.append(ErrorNote("logs:unmeasured", f"{source.name}: could not be read (a damaged or truncated "
                                    "file?) and no line was parsed; it is not measured"))
        elif opts.format != "auto" and lines:
            error = "format_mismatch"
            errors.append(ErrorNote("logs:unmeasured", f"{source.name}: none of its {lines} lines is in the "
                                    f"--format {opts.format} format; it is not measured (try --format auto)"))
    return FileRow(file=name, format=primary, lines=lines, parsed=parsed, bytes=stats.bytes - before[2],
                   skipped=skipped, formats=dict(report.formats), envelopes=dict(report.envelopes),
                   engine=report.engine, seconds=seconds, sniff_share=round(choice.share, 3), error=error)


@contextlib.contextmanager
def spool_stdin(stream: BinaryIO | None = None) -> Iterator[Path]:
    """Standard input (or ``stream``) copied to a temporary file, deleted afterwards.

    The parsers read a file twice (a sample to sniff the format, then the whole) and the polars engine reads it in
    chunks, so a pipe is spooled to disk once, in :data:`SPOOL_CHUNK_BYTES` pieces (memory stays flat).
    """
    source = stream if stream is not None else getattr(sys.stdin, "buffer", None)  # None: no stdin at all
    with tempfile.TemporaryDirectory(prefix="infradoctor-logs-") as tmp:
        path = Path(tmp) / "stdin.log"
        with path.open("wb") as fh:
            if source is not None:
                shutil.copyfileobj(source, fh, SPOOL_CHUNK_BYTES)
        yield path


def _file_year(path: Path) -> int:
    """Year for syslog lines (which carry none): the file's modification year."""
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc).year
    except (OSError, ValueError, OverflowError):
        return 1970


def build_metrics(
    evidence: LogsEvidence, stats: LogStats, files: list[FileRow], duration_s: float, cpu_s: float
) -> LogsMetrics:
    """The typed ``metrics`` of a logs result."""
    skipped_lines = sum(c for r, c in stats.skipped.items() if not r.startswith("file_"))
    mb = stats.bytes / 1e6
    mb_per_s = round(mb / duration_s, 1) if duration_s > 0 else None
    headline = LogsHeadline(
        lines=stats.lines,
        requests=evidence.requests,
        structured_lines=sum(n for f, n in stats.line_formats.items() if f != "text"),
        error_rate=round(evidence.request_errors / evidence.requests, 4) if evidence.requests else None,
        request_p50_ms=evidence.request_p50_ms,
        request_p99_ms=evidence.request_p99_ms,
        request_latency_n=evidence.request_latency_n,
        request_population=evidence.request_population if evidence.request_latency_n else "",
        upstream_p50_ms=evidence.upstream_p50_ms,
        upstream_p99_ms=evidence.upstream_p99_ms,
        upstream_latency_n=evidence.upstream_latency_n,
        router_overhead_p99_ms=evidence.overhead_p99_ms,
        router_time_n=evidence.overhead_samples,
        incidents=len(evidence.incidents) + evidence.incidents_dropped,
        failing_lines=sum(evidence.signature_counts.values()),
        skipped_lines=skipped_lines,
        parse_mb_per_s=mb_per_s,
    )
    distributions: dict[str, tuple[float, ...]] = {}
    if evidence.upstream_hist:
        distributions["upstream_latency_ms"] = tuple(hist_sample(evidence.upstream_hist, DISTRIBUTION_LIMIT))
    if evidence.request_hist:
        distributions["request_latency_ms"] = tuple(hist_sample(evidence.request_hist, DISTRIBUTION_LIMIT))
    xid_rows = []
    for (code, device, cause), count in sorted(stats.xids.items()):
        info = xid_info(code)
        xid_rows.append(XidRow(code=code, device=device if device != UNKNOWN_DEVICE else "unknown", count=count,
                               meaning=info.meaning, action=stats.xid_actions.get(code, info.action),
                               advice=info.advice, caused_by=cause or None))
    return LogsMetrics(
        headline=headline,
        files=tuple(files),
        skipped=dict(stats.skipped),
        notes=dict(stats.notes),
        upstreams=tuple(
            UpstreamRow(upstream=u.upstream, requests=u.attempts, errors=u.errors, error_rate=round(u.error_rate, 4),
                        p50_ms=u.p50_ms, p99_ms=u.p99_ms, timed=u.timed)
            for u in evidence.upstreams
        ),
        incidents=tuple(IncidentRow(
            kind=i.signature, code=i.code, subject=i.subject, start=iso(i.start_s), end=iso(i.end_s),
            duration_s=(i.end_s - i.start_s) if i.start_s is not None and i.end_s is not None else None,
            count=i.count, failures=i.failures, file=i.source, files=i.sources, examples=i.examples,
        ) for i in evidence.incidents),
        incidents_dropped=evidence.incidents_dropped,
        kinds={sig: KindRow(code=BY_ID[sig].code if sig in BY_ID else None, count=count,
                            meaning=BY_ID[sig].meaning if sig in BY_ID else "",
                            fix=BY_ID[sig].fix if sig in BY_ID else "")
               for sig, count in evidence.signature_counts.items()},
        timeline=build_timeline(stats),
        router_split=RouterSplit(
            requests=evidence.overhead_samples, router_p50_ms=evidence.overhead_p50_ms,
            router_p99_ms=evidence.overhead_p99_ms, upstream_p50_ms=evidence.upstream_p50_ms,
            upstream_p99_ms=evidence.upstream_p99_ms, upstream_n=evidence.upstream_latency_n,
            request_p50_ms=evidence.request_p50_ms, request_p99_ms=evidence.request_p99_ms,
            request_n=evidence.request_latency_n,
        ),
        attempts={str(k): v for k, v in evidence.attempts.items()},
        queue=tuple(QueueMinute(minute=iso(m * 60), requests=n, mean_ms=round(mean, 1), max_ms=mx)
                    for m, n, mean, mx in evidence.queue_by_minute),
        xid=tuple(xid_rows),
        exceptions=dict(evidence.exceptions),
        envoy_flags=dict(evidence.envoy_flags),
        haproxy_states=dict(evidence.haproxy_states),
        parse=ParseStats(bytes=stats.bytes, seconds=round(duration_s, 4), cpu_seconds=round(cpu_s, 4),
                         mb_per_s=mb_per_s, mb_per_cpu_s=round(mb / cpu_s, 1) if cpu_s > 0 else None,
                         engines=dict(stats.engines), formats=dict(stats.formats),
                         line_formats=dict(evidence.line_formats), envelopes=dict(stats.envelopes)),
        distributions={k: v for k, v in distributions.items() if v},
    )


def build_timeline(stats: LogStats) -> Timeline:
    """Per-bucket counts by status class and failure kind, in time order, at most MAX_TIMELINE_POINTS buckets."""
    if not stats.timeline_lines:
        return Timeline()
    minutes = [m for m, _ in stats.timeline_lines]
    span = max(minutes) - min(minutes) + 1
    bucket_min = max(1, -(-span // MAX_TIMELINE_POINTS))
    totals: Counter[int] = Counter()
    status: dict[int, Counter[str]] = {}
    kinds: dict[int, Counter[str]] = {}
    for (minute, klass), count in stats.timeline_lines.items():
        bucket = (minute // bucket_min) * bucket_min
        totals[bucket] += count
        status.setdefault(bucket, Counter())[klass] += count
    for (minute, signature), count in stats.timeline_kinds.items():
        bucket = (minute // bucket_min) * bucket_min
        kinds.setdefault(bucket, Counter())[signature] += count
    points = tuple(TimelinePoint(t=iso(bucket * 60), total=totals[bucket], status=dict(status.get(bucket, {})),
                                 kinds=dict(kinds.get(bucket, {}))) for bucket in sorted(totals))
    return Timeline(bucket_s=bucket_min * 60, points=points)
