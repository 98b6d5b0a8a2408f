"""``infradoctor load``: argv to :class:`~infradoctor.load.command.LoadOptions`, progress on stderr, the result.

The work and the result's ``metrics`` (:class:`~infradoctor.load.metrics.LoadMetrics`) are the library's:
:func:`infradoctor.load.run`. This module reads the arguments, shows progress, turns Ctrl-C into the engine's stop
signal and hands the result to :func:`~infradoctor.cli.base.finish` (exit 3 when no request reached the target).
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from infradoctor.cli.base import (
    Command,
    add_result_options,
    finish_interruptible,
    parse_headers,
    parse_levels,
    positive_seconds,
)
from infradoctor.errors import EXIT_INTERRUPTED, EXIT_TARGET, UsageError

if TYPE_CHECKING:
    from infradoctor.load.command import LoadOptions
    from infradoctor.load.point import PointResult, Progress, StopSignal
    from infradoctor.load.sweep import PointObserver
    from infradoctor.result import Result


class LoadCommand(Command):
    """Load-test an HTTP endpoint: sweeps, knee, corrected tails, error taxonomy, streaming timing.

    Closed loop (`--concurrency 1,2,4,8`, or `auto`, the default: doubles until two levels past the knee) or open loop
    (`--rate 10,50,100`, or `--rate auto --slo 'p99<500ms'` to find the highest rate that meets the SLO). Open-loop
    latency counts from the intended send time (coordinated-omission corrected) and from the actual send; both are
    reported. Throughput counts successful responses; latency percentiles (p50..p99.9, max, a 95% interval for p99,
    from mergeable HDR-style histograms) are of successful responses; failures are counted by class and timed
    apart. A target where nothing connects is given up after 0.5 s (exit 3). `--openai` streams OpenAI-compatible
    completions and reports TTFT, inter-token latency and tokens/s; `--sse` does the same for any server-sent-event
    endpoint. `--calibrate` measures the generator's own ceiling against a built-in null server. Ctrl-C stops and
    keeps the partial result.
    """

    name = "load"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Arguments."""
        from infradoctor.load.pacer import ARRIVALS

        parser.add_argument("url", nargs="?", help="target URL (http:// or https://)")
        parser.add_argument("--method", "-X", help="HTTP method (default GET, POST with a body)")
        body = parser.add_mutually_exclusive_group()
        body.add_argument("--body", metavar="FILE", type=Path, help="request body from a file")
        body.add_argument("--body-json", metavar="JSON", help="request body as a JSON string")
        body.add_argument(
            "--bodies", metavar="FILE.jsonl", type=Path, help="one request body per line, sent in rotation"
        )
        parser.add_argument(
            "-H", "--header", action="append", default=[], metavar="'K: V'", help="request header (repeatable)"
        )
        load = parser.add_mutually_exclusive_group()
        load.add_argument(
            "--concurrency",
            "-c",
            metavar="LIST|auto",
            help="closed loop: workers per point, e.g. 1,2,4,8, or auto (default)",
        )
        load.add_argument("--rate", "-r", metavar="LIST|auto", help="open loop: requests/s per point, or auto")
        parser.add_argument(
            "--slo", metavar="SLO",
            help="objective, e.g. 'p99<500ms,errors<1%%': the target of --rate auto (default p99<1s); with any "
                 "sweep, the highest level that met it, and findings that break it are high",
        )
        parser.add_argument("--arrivals", choices=ARRIVALS, default="constant", help="open-loop arrival process")
        parser.add_argument(
            "--duration",
            "-d",
            type=positive_seconds,
            default=None,
            metavar="S",
            help="seconds per point (default 5 unless --requests is given)",
        )
        parser.add_argument("--requests", "-n", type=int, default=None, metavar="N", help="requests per point")
        parser.add_argument(
            "--timeout", type=positive_seconds, default=30.0, metavar="S", help="per-request timeout (30)"
        )
        parser.add_argument("--max-concurrency", type=int, default=256, help="upper bound for --concurrency auto")
        parser.add_argument("--start-rate", type=positive_seconds, default=10.0, help="first rate of --rate auto")
        parser.add_argument("--max-connections", type=int, default=1024, help="open-loop connection pool limit")
        parser.add_argument(
            "--openai",
            action="store_true",
            help="OpenAI-compatible streaming (/v1/completions, /v1/chat/completions): TTFT, ITL",
        )
        parser.add_argument("--sse", action="store_true", help="time server-sent events of any endpoint")
        parser.add_argument("--model", default="default", help="model name for the default --openai body")
        parser.add_argument("--max-tokens", type=int, default=64, help="max_tokens of the default --openai body")
        parser.add_argument(
            "--no-headers",
            action="store_true",
            help="do not read Server-Timing / x-envoy-upstream-service-time (fastest)",
        )
        parser.add_argument("--insecure", "-k", action="store_true", help="https: skip certificate verification")
        parser.add_argument("--seed", type=int, default=0, help="seed for poisson arrivals and sampling")
        parser.add_argument(
            "--processes",
            "-p",
            type=int,
            default=1,
            help="generator processes per point (each runs a share; histograms are merged)",
        )
        parser.add_argument(
            "--calibrate",
            action="store_true",
            help="measure this machine's generator ceiling against a built-in null server",
        )
        stats = parser.add_argument_group(
            "router and server statistics",
            "Sampled on their own thread during the sweep (bounded; a missing endpoint is a note, never a delay) "
            "and cut at each point: metrics.points[].observations.telemetry. Findings: the router's retries, "
            "queues, rejections and host health (R003, R005, R009, R010, R011, R013), the model server's queue, "
            "KV cache, preemptions and batching tied to the client's latency point by point (S010-S013).",
        )
        stats.add_argument("--router-stats", action="append", default=[], metavar="URL",
                           help="the router's statistics (Envoy admin, HAProxy stats or runtime API, nginx "
                           "stub_status, Prometheus; as for route)")
        stats.add_argument("--server-metrics", action="append", default=[], metavar="URL",
                           help="a model server's Prometheus metrics (vLLM, TGI, Triton, ...; repeatable)")
        stats.add_argument("--stats-interval", type=positive_seconds, default=1.0, metavar="S",
                           help="seconds between statistics reads (1)")
        add_result_options(parser)

    # ------------------------------------------------------------------ run
    def options(self, args: argparse.Namespace) -> LoadOptions:
        """The library's options from the arguments; raises UsageError."""
        from infradoctor.load.command import LoadOptions

        if args.calibrate:
            levels = parse_levels(args.concurrency, int, "--concurrency") if args.concurrency else None
            return LoadOptions(calibrate=True, concurrency=levels, duration_s=args.duration, timeout_s=args.timeout,
                               capture_headers=not args.no_headers, processes=args.processes)
        if not args.url:
            raise UsageError("give a URL to load, or --calibrate")
        return LoadOptions(
            url=args.url,
            method=args.method,
            headers=parse_headers(args.header, "--header"),
            bodies=tuple(_read_bodies(args)),
            openai=args.openai,
            sse=args.sse,
            model=args.model,
            max_tokens=args.max_tokens,
            capture_headers=not args.no_headers,
            insecure=args.insecure,
            concurrency=None if args.rate is not None
            else parse_levels(args.concurrency or "auto", int, "--concurrency"),
            rate=parse_levels(args.rate, float, "--rate") if args.rate is not None else None,
            slo=args.slo,
            arrivals=args.arrivals,
            duration_s=args.duration,
            requests=args.requests,
            timeout_s=args.timeout,
            max_concurrency=args.max_concurrency,
            start_rate=args.start_rate,
            max_connections=args.max_connections,
            seed=args.seed,
            processes=args.processes,
            observers=_telemetry_observers(args),
        )

    def run(self, args: argparse.Namespace) -> int:
        """Run the sweep (or the calibration) and finish the result."""
        from dataclasses import replace

        from infradoctor.load.command import run, target_unreachable
        from infradoctor.load.point import StopSignal

        display = _ProgressDisplay(enabled=not args.quiet)
        stop = StopSignal()
        options = replace(self.options(args), on_progress=display.progress, on_point=display.point, stop=stop)
        for observer in options.observers:
            getattr(observer, "start", lambda: None)()  # the reads before the first point (bounded)
        with _ctrl_c_stops(stop):
            result = run(options)
        result = _with_observer_notes(result, options.observers)
        code = finish_interruptible(args, result)
        if code == EXIT_INTERRUPTED:
            return code
        return max(code, EXIT_TARGET) if target_unreachable(result) else code


def _telemetry_observers(args: argparse.Namespace) -> tuple[PointObserver, ...]:
    """The point observer of ``--router-stats``/``--server-metrics`` (none without them); raises UsageError."""
    urls = [*getattr(args, "router_stats", []), *getattr(args, "server_metrics", [])]
    if not urls:
        return ()
    from urllib.parse import urlsplit

    from infradoctor.telemetry.observer import TelemetryObserver

    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https", "unix", "tcp") or not (parts.hostname or parts.path):
            raise UsageError(f"not a statistics URL (http(s)://, unix:// or tcp://): {url!r}")
    return (TelemetryObserver(args.router_stats, args.server_metrics, interval_s=args.stats_interval),)


def _with_observer_notes(result: Result, observers: Sequence[PointObserver]) -> Result:
    """The result with a note per statistics endpoint an observer could not read."""
    from infradoctor.result import ErrorNote

    notes = [ErrorNote(f"load.{source}", message) for o in observers for source, message in getattr(o, "notes", [])]
    return result.with_(errors=(*result.errors, *notes)) if notes else result


def _read_bodies(args: argparse.Namespace) -> list[bytes]:
    """Request bodies from ``--body FILE``, ``--body-json JSON`` or ``--bodies FILE.jsonl`` (one body a line)."""
    try:
        if args.body is not None:
            return [Path(args.body).read_bytes()]
        if args.bodies is not None:
            lines = [line.strip().encode() for line in Path(args.bodies).read_text().splitlines() if line.strip()]
            if not lines:
                raise UsageError(f"--bodies {args.bodies}: no bodies in the file")
            return lines
        if args.body_json is not None:
            json.loads(args.body_json)
            return [args.body_json.encode()]
    except OSError as exc:
        raise UsageError(f"cannot read body: {exc}") from None
    except ValueError as exc:
        raise UsageError(f"--body-json is not valid JSON: {exc}") from None
    return []


@contextmanager
def _ctrl_c_stops(stop: StopSignal) -> Iterator[None]:
    """The first Ctrl-C asks the engine to stop (the partial result is kept); a second one interrupts."""
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum: int, frame: object) -> None:
        stop.set()
        signal.signal(signal.SIGINT, previous)

    try:
        signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread: no handler, Ctrl-C interrupts as usual
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _ProgressDisplay:
    """Progress on stderr: a live line while a point runs (on a terminal), one summary line per finished point."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = enabled and sys.stderr.isatty()

    def progress(self, progress: Progress) -> None:
        if not self.tty:
            return
        planned = (
            f"{progress.elapsed_s:4.1f}/{progress.duration_s:g}s"
            if progress.duration_s is not None
            else f"{progress.completed}/{progress.requests}"
        )
        p99 = f"{progress.p99_ms:.1f}" if math.isfinite(progress.p99_ms) else "-"
        sys.stderr.write(
            f"\r  {progress.label:>10} {planned} {progress.throughput_rps:9.1f} ok/s "
            f"p99 {p99} ms errors {progress.errors}   "
        )
        sys.stderr.flush()

    def point(self, point: PointResult) -> None:
        """One line per finished point, with the numbers the result's table shows (same values, same format)."""
        if not self.enabled:
            return
        from infradoctor.load.metrics import point_metrics
        from infradoctor.report.present.load import point_line

        prefix = "\r" if self.tty else ""
        sys.stderr.write(f"{prefix}  {point_line(point_metrics(point))}\n")
        sys.stderr.flush()


COMMAND = LoadCommand()
