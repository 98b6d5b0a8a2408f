"""The ``--load-url`` option group of ``infradoctor profile`` (kept apart from the profile command's own options).

``infradoctor profile --load-url URL [--ready-url URL] [--load-body FILE] [--concurrency ...] -- python server.py``
starts the server under the profiler, drives a load sweep at URL, stops the server and reports both sides.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from infradoctor.cli.base import finish_interruptible, parse_headers, parse_levels, positive_seconds
from infradoctor.errors import EXIT_INTERRUPTED, EXIT_TARGET, UsageError


def add_load_options(parser: argparse.ArgumentParser) -> None:
    """The ``service under load`` option group."""
    from infradoctor.profile_load import DEFAULT_LEVELS, DEFAULT_POINT_DURATION_S, DEFAULT_READY_TIMEOUT_S

    group = parser.add_argument_group(
        "service under load",
        "With --load-url the command starts a server: it is profiled while a load sweep runs against URL,\n"
        "then stopped (SIGINT, SIGTERM, SIGKILL). Findings cover the workload (P001-P015), the service\n"
        "(S002 blocked event loop with its line, S004 model copy per worker) and the load (S001, S003, S005,\n"
        "the knee).",
    )
    group.add_argument("--load-url", metavar="URL", help="drive load at this URL of the server the command starts")
    group.add_argument("--ready-url", metavar="URL",
                       help="poll this URL until it answers before loading (default: the load URL's origin /)")
    group.add_argument("--ready-timeout", type=positive_seconds, default=DEFAULT_READY_TIMEOUT_S, metavar="S",
                       help=f"give up waiting for the server after S seconds (default {DEFAULT_READY_TIMEOUT_S:g})")
    group.add_argument("--load-body", type=Path, metavar="FILE", help="request body (POST unless --load-method)")
    group.add_argument("--load-method", metavar="METHOD", help="HTTP method (default GET, POST with a body)")
    group.add_argument("--load-header", action="append", default=[], metavar="'K: V'",
                       help="request header (repeatable)")
    group.add_argument("--concurrency", metavar="LIST|auto", default=",".join(map(str, DEFAULT_LEVELS)),
                       help="closed-loop concurrency levels, or auto (default %(default)s)")
    group.add_argument("--point-duration", type=positive_seconds, default=DEFAULT_POINT_DURATION_S, metavar="S",
                       help="seconds per concurrency level (default %(default)s)")
    group.add_argument("--point-requests", type=int, metavar="N", help="requests per level instead of a duration")
    group.add_argument("--load-timeout", type=positive_seconds, default=30.0, metavar="S",
                       help="per-request timeout (default %(default)s)")


def run_with_load(args: argparse.Namespace, argv: list[str]) -> int:
    """``profile --load-url``: run, load, stop, merge, finish (with a progress line on stderr meanwhile)."""
    from infradoctor.cli.profile import run_options
    from infradoctor.profile_load.run import ServiceLoadOptions, run, service_failed

    if args.steps is not None or args.duration is not None:
        raise UsageError("--steps and --duration do not apply with --load-url (the sweep decides how long it runs)")
    if args.point_duration <= 0 or args.load_timeout <= 0 or args.ready_timeout <= 0:
        raise UsageError("--point-duration, --load-timeout and --ready-timeout must be positive")
    if args.point_requests is not None and args.point_requests < 1:
        raise UsageError("--point-requests must be at least 1")
    bodies: tuple[bytes, ...] = ()
    if args.load_body is not None:
        try:
            bodies = (args.load_body.read_bytes(),)
        except OSError as exc:
            raise UsageError(f"cannot read --load-body: {exc}") from None
    progress = progress_line(enabled=not args.quiet)
    service = ServiceLoadOptions(
        load_url=args.load_url,
        ready_url=args.ready_url,
        ready_timeout_s=args.ready_timeout,
        method=args.load_method,
        bodies=bodies,
        headers=parse_headers(args.load_header, "--load-header"),
        concurrency=parse_levels(args.concurrency, int, "--concurrency"),
        point_duration_s=args.point_duration if args.point_requests is None else None,
        point_requests=args.point_requests,
        timeout_s=args.load_timeout,
        progress=progress,
    )
    try:
        result = run(run_options(args, argv), service)
    finally:
        if progress is not None:
            progress("")  # end the live line
    code = finish_interruptible(args, result)
    if code == EXIT_INTERRUPTED:
        return code
    failed = service_failed(result)
    if failed is not None:
        print(f"infradoctor profile: error: {failed}", file=sys.stderr)
        return EXIT_TARGET  # the partial result is written; the service itself could not be measured
    return code


LINE_WIDTH = 96
"""Characters of the live progress line (on a terminal)."""


def progress_line(*, enabled: bool) -> Callable[[str], None] | None:
    """What the run is doing, on stderr: a live line on a terminal; elsewhere one line per phase.

    The library says ``phase: detail`` (``waiting for the server to answer URL: 3 s``, ``load at c=4: 120 requests
    so far, 1.5/3 s``); off a terminal a line is written when the phase changes, not at every tick.
    """
    if not enabled:
        return None
    tty = sys.stderr.isatty()
    last_phase = [""]

    def say(text: str) -> None:
        if tty:
            shown = text if len(text) <= LINE_WIDTH else text[: LINE_WIDTH - 1] + "…"
            sys.stderr.write(f"\r  profile: {shown:<{LINE_WIDTH}}" if text else "\r" + " " * (LINE_WIDTH + 11) + "\r")
        else:
            phase = text.split(": ", 1)[0] if text else ""
            if phase and phase != last_phase[0]:
                sys.stderr.write(f"  profile: {text}\n")
            last_phase[0] = phase
        sys.stderr.flush()

    return say
