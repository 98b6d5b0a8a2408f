"""``analyze_logs(paths, options) -> Result``: read every file, sniff its format, parse, build evidence, run rules.

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
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

from infradoctor.findings import run_rules
from infradoctor.logs.evidence import LogsEvidence, build_evidence, hist_sample, iso
from infradoctor.logs.formats import ParseOptions, choose_format
from infradoctor.logs.formats.access import POLARS_REQUIREMENT
from infradoctor.logs.incidents import LogsRuleOptions
from infradoctor.logs.signatures import BY_ID
from infradoctor.logs.source import SourceError, open_source, read_sample
from infradoctor.logs.stats import LogStats
from infradoctor.result import ErrorNote, Result, new_result, utc_now_iso
from infradoctor.xid import xid_info

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

    format: str = "auto"
    """``--format``: auto or one format for every file."""
    nginx_log_format: str | None = None
    """``--nginx-log-format``: the nginx ``log_format`` string of the access logs."""
    envoy_log_format: str | None = None
    """``--envoy-log-format``: the Envoy access-log format string (default and Istio formats are known)."""
    engine: str = "auto"
    """Access-log engine: auto, polars or python."""
    rules: LogsRuleOptions = LogsRuleOptions()
    """Rule options."""


def analyze_logs(
    paths: Sequence[Path | str],
    options: LogsOptions | None = None,
    *,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.process_time,
    now: Callable[[], str] = utc_now_iso,
    stdin: BinaryIO | None = None,
) -> Result:
    """Analyse the log files and return the ``logs`` result.

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
    file_rows: list[dict[str, Any]] = []
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
        errors += [ErrorNote(f"logs:skipped:{reason}", f"{row['file']}: lines skipped ({reason.replace('_', ' ')})",
                             count) for reason, count in sorted(row["skipped"].items())]
    errors += [ErrorNote(f"logs:{reason}", f"lines used with a caveat: {reason.replace('_', ' ')}", count)
               for reason, count in sorted(stats.notes.items())]
    errors += [ErrorNote("logs:read", message) for message in stats.messages]
    evidence = build_evidence(stats, tuple(str(p) for p in paths))
    findings = run_rules(evidence, opts.rules)
    duration = clock() - start
    metrics = build_metrics(evidence, stats, file_rows, duration, cpu_clock() - cpu_start)
    return new_result(
        "logs",
        started_at=started_at,
        duration_s=duration,
        target={"files": [str(p) for p in paths], "format": opts.format,
                **({"nginx_log_format": opts.nginx_log_format} if opts.nginx_log_format else {}),
                **({"envoy_log_format": opts.envoy_log_format} if opts.envoy_log_format else {})},
        metrics=metrics,
        findings=findings,
        errors=errors,
    )


def _analyze_file(path: Path, name: str, opts: LogsOptions, parse_options: ParseOptions, stats: LogStats,
                  errors: list[ErrorNote], clock: Callable[[], float]) -> dict[str, Any]:
    """Parse one file into ``stats``; its ``metrics.files`` row (``error`` set when nothing could be measured)."""
    row: dict[str, Any] = {"file": name, "format": None, "lines": 0, "parsed": 0, "skipped": {}, "bytes": 0}
    try:
        source = open_source(path, name)
    except SourceError as exc:
        row["error"] = exc.reason
        stats.skip(f"file_{exc.reason}", 1)
        errors.append(ErrorNote(f"logs:{exc.reason}", str(exc)))
        return row
    if source.size_bytes == 0:
        row["error"] = "empty"
        errors.append(ErrorNote("logs:empty", f"{source.name}: empty file"))
        return row
    sample = read_sample(source)
    fmt, score = choose_format(opts.format, sample, nginx_log_format=opts.nginx_log_format,
                               envoy_log_format=opts.envoy_log_format, year=_file_year(path))
    row["format"] = fmt.name
    row["sniff_share"] = round(score, 3)
    before = (stats.lines, stats.parsed, stats.bytes, Counter(stats.skipped), Counter(stats.engines))
    file_start = clock()
    fmt.parse(source, stats, parse_options)
    row["seconds"] = round(clock() - file_start, 4)
    row["lines"] = stats.lines - before[0]
    row["parsed"] = stats.parsed - before[1]
    row["bytes"] = stats.bytes - before[2]
    row["skipped"] = dict(stats.skipped - before[3])
    engines = stats.engines - before[4]
    if engines:
        row["engine"] = next(iter(engines))
    stats.formats[fmt.name] += 1
    if not sample:
        errors.append(ErrorNote("logs:no_text", f"{source.name}: no text lines at the start (binary?)"))
    if row["parsed"] == 0:
        read_errors = sum(row["skipped"].get(reason, 0) for reason in READ_ERRORS)
        if read_errors:
            row["error"] = "read_error"
            errors.append(ErrorNote("logs:unmeasured", f"{source.name}: could not be read (a damaged or truncated "
                                    "file?) and no line was parsed; it is not measured"))
        elif opts.format != "auto" and row["lines"]:
            row["error"] = "format_mismatch"
            errors.append(ErrorNote("logs:unmeasured", f"{source.name}: none of its {row['lines']} lines is in the "
                                    f"--format {opts.format} format; it is not measured (try --format auto)"))
    return row


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
    evidence: LogsEvidence, stats: LogStats, files: list[dict[str, Any]], duration_s: float, cpu_s: float
) -> dict[str, Any]:
    """The ``metrics`` of a logs result (layout documented in :mod:`infradoctor.logs`)."""
    skipped_lines = sum(c for r, c in stats.skipped.items() if not r.startswith("file_"))
    mb = stats.bytes / 1e6
    headline: dict[str, Any] = {
        "lines": stats.lines,
        "requests": evidence.requests,
        "error_rate": round(evidence.request_errors / evidence.requests, 4) if evidence.requests else None,
        "request_p50_ms": evidence.request_p50_ms,
        "request_p99_ms": evidence.request_p99_ms,
        "upstream_p99_ms": evidence.upstream_p99_ms,
        "router_overhead_p99_ms": evidence.overhead_p99_ms,
        "incidents": len(evidence.incidents) + evidence.incidents_dropped,
        "failing_lines": sum(evidence.signature_counts.values()),
        "skipped_lines": skipped_lines,
        "parse_mb_per_s": round(mb / duration_s, 1) if duration_s > 0 else None,
    }
    distributions: dict[str, list[float]] = {}
    if evidence.upstream_hist:
        distributions["upstream_latency_ms"] = hist_sample(evidence.upstream_hist, DISTRIBUTION_LIMIT)
    if evidence.request_hist:
        distributions["request_latency_ms"] = hist_sample(evidence.request_hist, DISTRIBUTION_LIMIT)
    distributions = {k: v for k, v in distributions.items() if v}
    return {
        "headline": {k: v for k, v in headline.items() if v is not None},
        "files": files,
        "skipped": dict(stats.skipped),
        "notes": dict(stats.notes),
        "upstreams": [
            {"upstream": u.upstream, "requests": u.attempts, "errors": u.errors, "error_rate": round(u.error_rate, 4),
             "p50_ms": u.p50_ms, "p99_ms": u.p99_ms}
            for u in evidence.upstreams
        ],
        "incidents": [i.to_dict() for i in evidence.incidents],
        "incidents_dropped": evidence.incidents_dropped,
        "kinds": {
            sig: {"code": BY_ID[sig].code if sig in BY_ID else None, "count": count,
                  "meaning": BY_ID[sig].meaning if sig in BY_ID else "", "fix": BY_ID[sig].fix if sig in BY_ID else ""}
            for sig, count in evidence.signature_counts.items()
        },
        "timeline": build_timeline(stats),
        "router_split": {
            "requests": evidence.overhead_samples,
            "router_p50_ms": evidence.overhead_p50_ms,
            "router_p99_ms": evidence.overhead_p99_ms,
            "upstream_p50_ms": evidence.upstream_p50_ms,
            "upstream_p99_ms": evidence.upstream_p99_ms,
            "request_p50_ms": evidence.request_p50_ms,
            "request_p99_ms": evidence.request_p99_ms,
        },
        "attempts": {str(k): v for k, v in evidence.attempts.items()},
        "queue": [{"minute": iso(m * 60), "requests": n, "mean_ms": round(mean, 1), "max_ms": mx}
                  for m, n, mean, mx in evidence.queue_by_minute],
        "xid": [{"code": code, "device": device, "count": count, "meaning": xid_info(code).meaning,
                 "action": xid_info(code).action, "advice": xid_info(code).advice}
                for (code, device), count in sorted(evidence.xids.items())],
        "exceptions": dict(evidence.exceptions),
        "parse": {"bytes": stats.bytes, "seconds": round(duration_s, 4), "cpu_seconds": round(cpu_s, 4),
                  "mb_per_s": headline["parse_mb_per_s"],
                  "mb_per_cpu_s": round(mb / cpu_s, 1) if cpu_s > 0 else None, "engines": dict(stats.engines),
                  "formats": dict(stats.formats)},
        "distributions": distributions,
    }


def build_timeline(stats: LogStats) -> dict[str, Any]:
    """Per-bucket counts by status class and failure kind, in time order, at most MAX_TIMELINE_POINTS buckets."""
    if not stats.timeline:
        return {"bucket_s": 60, "points": []}
    minutes = [m for m, _, _ in stats.timeline]
    span = max(minutes) - min(minutes) + 1
    bucket_min = max(1, -(-span // MAX_TIMELINE_POINTS))
    points: dict[int, dict[str, Any]] = {}
    for (minute, klass, signature), count in stats.timeline.items():
        bucket = (minute // bucket_min) * bucket_min
        point = points.setdefault(bucket, {"t": iso(bucket * 60), "total": 0, "status": Counter(),
                                           "kinds": Counter()})
        point["total"] += count
        point["status"][klass] += count
        if signature:
            point["kinds"][signature] += count
    ordered = [points[k] for k in sorted(points)]
    for point in ordered:
        point["status"] = dict(point["status"])
        point["kinds"] = dict(point["kinds"])
    return {"bucket_s": bucket_min * 60, "points": ordered}
