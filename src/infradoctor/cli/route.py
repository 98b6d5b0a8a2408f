"""``infradoctor route``: is it the router or the node?"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from infradoctor.cli.base import Command, add_result_options, finish_interruptible, parse_headers
from infradoctor.errors import EXIT_INTERRUPTED, EXIT_TARGET, UsageError

if TYPE_CHECKING:
    from infradoctor.load.engine import StopSignal
    from infradoctor.result import Result


class RouteCommand(Command):
    """Is it the router or the node? Compare requests through the router with the same requests sent directly.

    The same request goes through the router and straight to each backend, interleaved in time, with each
    backend as loaded on its direct path as the router loads it, so drift and load hit every path alike.
    Reports per-path percentiles with confidence intervals, the latency the router adds at p50 and p99, which
    backend served each routed request (from X-Upstream-Addr, X-Served-By, X-Backend or x-envoy-upstream-host),
    unhealthy or slow backends, uneven distribution, retries, the router's timeout, a health-check audit, and TCP
    connect times. Exits 3 (with the partial result written) when no request could connect to the router.

    Example: infradoctor route --router http://lb:8080/predict --backend http://10.0.0.5:8000
    --backend http://10.0.0.6:8000 --method POST --body req.json --duration 20
    """

    name = "route"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Arguments."""
        from infradoctor.route.rules._common import DEFAULT_SLOW_MS

        parser.add_argument("--router", required=True, metavar="URL", help="router URL including the request path")
        parser.add_argument(
            "--backend",
            action="append",
            required=True,
            metavar="URL",
            help="a backend behind the router (repeat); without a path it gets the router URL's path",
        )
        parser.add_argument("--method", "-X", default=None, help="HTTP method (default GET, POST with --body)")
        parser.add_argument("--body", metavar="FILE", type=Path, help="request body file")
        parser.add_argument("-H", "--header", action="append", default=[], metavar="'K: V'", help="request header")
        parser.add_argument(
            "--concurrency", "-c", type=int, default=4, help="in-flight requests through the router (4)"
        )
        parser.add_argument(
            "--direct-concurrency",
            type=int,
            metavar="N",
            help="in-flight requests to each backend directly (default: concurrency / backends, rounded up: "
            "the load the router gives each backend)",
        )
        parser.add_argument("--duration", type=float, default=10.0, metavar="S", help="measurement length (10 s)")
        parser.add_argument("--requests", type=int, default=100_000, metavar="N", help="request budget (100000)")
        parser.add_argument("--timeout", type=float, default=30.0, metavar="S", help="per-request timeout (30 s)")
        parser.add_argument("--backend-header", metavar="NAME", help="response header naming the serving backend")
        parser.add_argument("--weights", metavar="W,W,...", help="expected relative share per backend, in order")
        parser.add_argument("--health-path", metavar="PATH", help="backend health path (default: try /health, ...)")
        parser.add_argument(
            "--counter-path", metavar="PATH", help="backend request counter (JSON 'requests' or Prometheus text)"
        )
        parser.add_argument("--connects", type=int, default=50, metavar="N", help="TCP connect probes per endpoint")
        parser.add_argument("--iperf", action="store_true", help="measure bandwidth where an iperf3 server answers")
        parser.add_argument("--iperf-port", type=int, default=5201, help="iperf3 server port (5201)")
        parser.add_argument(
            "--slow-ms",
            type=float,
            default=DEFAULT_SLOW_MS,
            help=f"direct p50 in ms from which backends count as slow ({DEFAULT_SLOW_MS:g})",
        )
        parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (0)")
        stats = parser.add_argument_group(
            "router and server statistics",
            "Sampled on their own thread before, during and after the run (bounded; a missing or bad endpoint is a "
            "note, never a delay): counters as growth, gauges as series. The router's own word decides retries "
            "(R005), queueing (R009), rejections (R013), ejected or failing hosts (R003, R010, panic mode) and "
            "membership changes (R011); its host names (HAProxy server names, Envoy hostnames) map to --backend "
            "URLs by address.",
        )
        stats.add_argument(
            "--router-stats", action="append", default=[], metavar="URL",
            help="the router's statistics: Envoy admin (http://host:9901), HAProxy stats (.../;csv, its Prometheus "
            "exporter, or the runtime API unix:///path.sock / tcp://host:port), nginx stub_status, any Prometheus "
            "endpoint; kind detected from the answer",
        )
        stats.add_argument(
            "--server-metrics", action="append", default=[], metavar="URL",
            help="a model server's Prometheus metrics (vLLM, TGI, Triton, TorchServe, Ray Serve, SGLang, "
            "infradoctor middleware; repeatable)",
        )
        stats.add_argument("--stats-interval", type=float, default=1.0, metavar="S",
                           help="seconds between statistics reads (1)")
        add_result_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Probe and report."""
        from infradoctor.load.engine import StopSignal
        from infradoctor.route.diagnose import RouteOptions, parse_weights, router_unreachable, run

        body = None
        if args.body is not None:
            try:
                body = args.body.read_bytes()
            except OSError as exc:
                raise UsageError(f"cannot read --body {args.body}: {exc}") from None
        stop = StopSignal()
        options = RouteOptions(
            router=args.router,
            backends=tuple(args.backend),
            method=(args.method or ("POST" if body is not None else "GET")).upper(),
            body=body,
            headers=parse_headers(args.header, "--header"),
            concurrency=args.concurrency,
            direct_concurrency=args.direct_concurrency,
            duration_s=args.duration,
            max_requests=args.requests,
            timeout_s=args.timeout,
            backend_header=args.backend_header,
            weights=parse_weights(args.weights, len(args.backend)),
            health_path=args.health_path,
            counter_path=args.counter_path,
            connect_probes=max(0, args.connects),
            iperf=args.iperf,
            iperf_port=args.iperf_port,
            slow_ms=args.slow_ms,
            seed=args.seed,
            stop=stop,
            progress=_progress_line(enabled=not args.quiet),
            router_stats=tuple(args.router_stats),
            server_metrics=tuple(args.server_metrics),
            stats_interval_s=args.stats_interval,
        )
        result = _with_sigint(stop, lambda: run(options))
        if options.progress is not None:
            options.progress("")  # end the live line
        code = finish_interruptible(args, result)
        if code == EXIT_INTERRUPTED:
            return code
        if router_unreachable(result):  # nothing went through the router: the partial result is written, exit 3
            return max(code, EXIT_TARGET)
        return code


def _progress_line(*, enabled: bool) -> Callable[[str], None] | None:
    """A live line on stderr while route works (on a terminal); elsewhere one line per phase, not per slot."""
    if not enabled:
        return None
    tty = sys.stderr.isatty()
    last_phase = [""]

    def say(text: str) -> None:
        if tty:
            sys.stderr.write(f"\r  route: {text:<90}" if text else "\r" + " " * 100 + "\r")
        else:
            phase = text.split(" ", 1)[0] if text else ""
            if phase and phase != last_phase[0]:
                sys.stderr.write(f"  route: {text}\n")
            last_phase[0] = phase
        sys.stderr.flush()

    return say


def _with_sigint(stop: StopSignal, work: Callable[[], Result]) -> Result:
    """Run ``work`` with Ctrl-C setting ``stop`` (a partial result follows); a second Ctrl-C interrupts."""
    if threading.current_thread() is not threading.main_thread():
        return work()

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        stop.set()
        signal.signal(signal.SIGINT, previous)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        return work()
    finally:
        signal.signal(signal.SIGINT, previous)


COMMAND = RouteCommand()
