"""``infradoctor load``: argument parsing, progress display and the result of a load test.

The result's ``metrics`` (documented in full in :mod:`infradoctor.load.analysis`): ``mode``, ``settings``,
``points[]`` (one per offered load: ``concurrency`` or ``rate``, ``throughput_rps``, ``goodput_rps``,
``latency_ms`` {p50, p90, p95, p99, p99_9, max, p99_ci}, ``errors`` by class, open-loop ``latency_from_send_ms``,
``server_timing_ms``, ``stream`` {ttft_ms, itl_ms, output_tokens_per_s}, ``saturated``), ``knee`` (null when none),
``curve`` (latency-vs-load plot data), ``headline``, ``distributions.latency_ms``, ``slo`` and ``calibration``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infradoctor.cli.base import (
    Command,
    add_result_options,
    finish,
    finish_interruptible,
    parse_headers,
    parse_levels,
    positive_seconds,
)
from infradoctor.errors import EXIT_INTERRUPTED, EXIT_TARGET, UsageError
from infradoctor.load.taxonomy import CONNECT_ERROR, CONNECT_REFUSED, CONNECT_TIMEOUT

if TYPE_CHECKING:
    from infradoctor.load.engine import PointResult, Progress
    from infradoctor.load.spec import RequestSpec
    from infradoctor.load.sweep import Slo, SweepResult
    from infradoctor.result import ErrorNote

_CONNECT_CLASSES = (CONNECT_REFUSED, CONNECT_TIMEOUT, CONNECT_ERROR)
CALIBRATE_CONCURRENCY = 32
"""Connections used by ``--calibrate`` unless ``--concurrency`` names one level."""


class LoadCommand(Command):
    """Load-test an HTTP endpoint: sweeps, knee, corrected tails, error taxonomy, streaming timing.

    Closed loop (`--concurrency 1,2,4,8`, or `auto`, the default: doubles until two levels past the knee) or open loop
    (`--rate 10,50,100`, or `--rate auto --slo 'p99<500ms'` to find the highest rate that meets the SLO). Open-loop
    latency counts from the intended send time (coordinated-omission corrected) and from the actual send; both are
    reported. Every request, timeouts included, goes into mergeable HDR-style histograms (p50..p99.9, max, a 95%
    interval for p99). `--openai` streams OpenAI-compatible completions and reports TTFT, inter-token latency and
    tokens/s; `--sse` does the same for any server-sent-event endpoint. `--calibrate` measures the generator's own
    ceiling against a built-in null server. Ctrl-C stops and keeps the partial result.
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
            "--slo", metavar="SLO", help="objective for --rate auto, e.g. 'p99<500ms,errors<1%%' (default p99<1s)"
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
        add_result_options(parser)

    # ------------------------------------------------------------------ spec
    def _spec(self, args: argparse.Namespace, url: str) -> RequestSpec:
        from infradoctor.load.spec import RequestSpec, Target, force_stream, openai_default_body

        Target.parse(url)
        headers = parse_headers(args.header, "--header")
        bodies: list[bytes] = []
        try:
            if args.body is not None:
                bodies = [args.body.read_bytes()]
            elif args.bodies is not None:
                bodies = [line.strip().encode() for line in args.bodies.read_text().splitlines() if line.strip()]
                if not bodies:
                    raise UsageError(f"--bodies {args.bodies}: no bodies in the file")
            elif args.body_json is not None:
                json.loads(args.body_json)
                bodies = [args.body_json.encode()]
        except OSError as exc:
            raise UsageError(f"cannot read body: {exc}") from None
        except ValueError as exc:
            raise UsageError(f"--body-json is not valid JSON: {exc}") from None
        if args.openai:
            if not bodies:
                bodies = [openai_default_body(Target.parse(url).path.split("?")[0], args.model, args.max_tokens)]
            bodies = [force_stream(b) for b in bodies]
        if bodies and not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
        method = (args.method or ("POST" if bodies or args.openai else "GET")).upper()
        capture = () if args.no_headers else ("server-timing", "x-envoy-upstream-service-time")
        return RequestSpec(
            url=url,
            method=method,
            headers=headers,
            bodies=tuple(bodies),
            stream=bool(args.openai or args.sse),
            openai=bool(args.openai),
            capture_headers=capture,
            insecure=args.insecure,
        )

    # ------------------------------------------------------------------ run
    def run(self, args: argparse.Namespace) -> int:
        """Run the sweep (or the calibration) and finish the result."""
        from infradoctor.load import client
        from infradoctor.load.analysis import build_metrics, diagnose
        from infradoctor.load.sweep import Slo
        from infradoctor.result import ErrorNote, new_result, utc_now_iso

        if args.calibrate:
            return self._calibrate(args)
        if not args.url:
            raise UsageError("give a URL to load, or --calibrate")
        spec = self._spec(args, args.url)
        if args.duration is None and args.requests is None:
            args.duration = 5.0
        if (args.duration is not None and args.duration <= 0) or (args.requests is not None and args.requests < 1):
            raise UsageError("--duration and --requests must be positive")
        if args.timeout <= 0:
            raise UsageError("--timeout must be positive")
        if args.processes < 1:
            raise UsageError("--processes must be at least 1")
        slo: Slo | None = None
        if args.slo:
            try:
                slo = Slo.parse(args.slo)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        options: dict[str, Any] = {}
        if args.rate is not None:
            options["rate"] = parse_levels(args.rate, float, "--rate")
            options["slo"] = slo
            options["start_rate"] = args.start_rate
        else:
            options["concurrency"] = parse_levels(args.concurrency or "auto", int, "--concurrency")
            options["max_concurrency"] = args.max_concurrency
        settings = {
            "url": spec.url,
            "method": spec.method,
            "timeout_s": args.timeout,
            "duration_s": args.duration,
            "requests": args.requests,
            "arrivals": args.arrivals if args.rate is not None else None,
            "levels": options.get("rate", options.get("concurrency")),
            "stream": spec.stream,
            "openai": spec.openai,
            "bodies": len(spec.bodies),
            "parser": "httptools" if client.HAVE_HTTPTOOLS else "python",
            "event_loop": _loop_name(),
            "processes": args.processes,
        }
        started_at = utc_now_iso()
        t0 = time.perf_counter()
        sweep, errors = self._drive(args, spec, options)
        metrics = build_metrics(sweep, settings)
        notes = list(errors)
        reached = any(p.ok or any(k not in _CONNECT_CLASSES for k in p.errors) for p in sweep.points)
        if sweep.points and not reached:
            classes = sorted({k for p in sweep.points for k in p.errors})
            notes.append(ErrorNote("load.target", f"no request reached {spec.url}: {', '.join(classes)}"))
        if sweep.interrupted:
            notes.append(ErrorNote("load.interrupted", "stopped by Ctrl-C; the result holds the points so far"))
        result = new_result(
            "load",
            started_at=started_at,
            duration_s=time.perf_counter() - t0,
            target={"url": spec.url, "method": spec.method},
            metrics=metrics,
            findings=diagnose(metrics),
            errors=notes,
        )
        code = finish_interruptible(args, result)
        if code == EXIT_INTERRUPTED:
            return code
        if sweep.points and not reached:
            return max(code, EXIT_TARGET)
        return code

    def _drive(
        self, args: argparse.Namespace, spec: RequestSpec, options: dict[str, Any]
    ) -> tuple[SweepResult, list[ErrorNote]]:
        from infradoctor.load.engine import StopSignal, run_sync
        from infradoctor.load.sweep import SweepResult, run_sweep_async

        stop = StopSignal()
        display = _ProgressDisplay(enabled=not args.quiet)
        finished: list[PointResult] = []

        def on_point(point: PointResult) -> None:
            finished.append(point)
            display.point(point)

        async def main() -> SweepResult:
            loop = asyncio.get_running_loop()

            def on_sigint() -> None:
                stop.set()
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(signal.SIGINT)

            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signal.SIGINT, on_sigint)
            try:
                return await run_sweep_async(
                    spec,
                    stop=stop,
                    on_point=on_point,
                    on_progress=display.progress,
                    duration_s=args.duration,
                    requests=args.requests,
                    timeout_s=args.timeout,
                    arrivals=args.arrivals,
                    max_connections=args.max_connections,
                    seed=args.seed,
                    processes=args.processes,
                    **options,
                )
            finally:
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(signal.SIGINT)

        try:
            sweep: SweepResult = run_sync(main())
            return sweep, []
        except KeyboardInterrupt:
            partial = SweepResult("closed" if "concurrency" in options else "open", stop_reason="interrupted")
            partial.points = finished
            return partial, []

    def _calibrate(self, args: argparse.Namespace) -> int:
        from infradoctor.load import client
        from infradoctor.load.analysis import build_metrics
        from infradoctor.load.engine import run_point_async, run_sync
        from infradoctor.load.nullserver import null_server
        from infradoctor.load.spec import RequestSpec
        from infradoctor.load.sweep import SweepResult
        from infradoctor.result import new_result, utc_now_iso

        levels = parse_levels(args.concurrency, int, "--concurrency") if args.concurrency else [CALIBRATE_CONCURRENCY]
        concurrency = levels[0] if isinstance(levels, list) else CALIBRATE_CONCURRENCY
        duration = args.duration or 3.0
        started_at = utc_now_iso()
        t0 = time.perf_counter()
        display = _ProgressDisplay(enabled=not args.quiet)
        with null_server() as url:
            spec = RequestSpec(url, capture_headers=() if args.no_headers else ("server-timing",))
            point: PointResult = run_sync(
                run_point_async(
                    spec,
                    concurrency=concurrency,
                    duration_s=duration,
                    timeout_s=args.timeout,
                    on_progress=display.progress,
                    label=f"null c={concurrency}",
                )
            )
        display.point(point)
        sweep = SweepResult("closed", points=[point], stop_reason="calibration")
        settings = {
            "url": "null-server",
            "method": "GET",
            "timeout_s": args.timeout,
            "duration_s": duration,
            "calibrate": True,
        }
        metrics = build_metrics(sweep, settings)
        metrics["knee"] = None
        metrics["calibration"] = {
            "concurrency": concurrency,
            "throughput_rps": round(point.throughput_rps, 1),
            "client_cpu_fraction": round(point.client_cpu_fraction, 3),
            "p99_ms": point.latency.summary_ms().get("p99"),
            "parser": "httptools" if client.HAVE_HTTPTOOLS else "python",
            "event_loop": _loop_name(),
            "processes": args.processes,
        }
        metrics["headline"] = {
            "calibration_rps": round(point.throughput_rps, 1),
            "client_cpu_fraction": round(point.client_cpu_fraction, 3),
        }
        result = new_result(
            "load",
            started_at=started_at,
            duration_s=time.perf_counter() - t0,
            target={"url": "null-server", "calibrate": True},
            metrics=metrics,
        )
        return finish(args, result)


def _loop_name() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


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
            f"\r  {progress.label:>10} {planned} {progress.throughput_rps:9.1f} req/s "
            f"p99 {p99} ms errors {progress.errors}   "
        )
        sys.stderr.flush()

    def point(self, point: PointResult) -> None:
        if not self.enabled:
            return
        lat = point.latency.summary_ms()
        flags = " [client saturated]" if point.saturated else ""
        prefix = "\r" if self.tty else ""
        sys.stderr.write(
            f"{prefix}  {point.label:>10} {point.throughput_rps:9.1f} req/s  p50 {_ms(lat.get('p50'))} ms  "
            f"p99 {_ms(lat.get('p99'))} ms  errors {point.error_rate:.2%}{flags}\n"
        )
        sys.stderr.flush()


def _ms(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else "-"


COMMAND = LoadCommand()
