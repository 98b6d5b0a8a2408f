"""``infradoctor profile -- python script.py ARGS``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infradoctor.bounded import printable
from infradoctor.cli.base import Command, add_result_options, finish
from infradoctor.cli.profile_load import add_load_options, run_with_load
from infradoctor.errors import TargetError, UsageError

if TYPE_CHECKING:
    from infradoctor.profile.result import ProfileRunOptions
    from infradoctor.result import Result


class ProfileCommand(Command):
    """Run a Python workload under light instrumentation and name its bottleneck.

    The workload runs as its own process with its stdin/stdout/stderr untouched; steps are found from DataLoader
    batches, optimizer.step() and top-level model calls. The result shows the step-time breakdown (data wait,
    forward, backward, optimizer, host syncs, other Python), throughput, memory per step and findings P001-P015
    with the line to change. Ctrl-C or a crashing workload still gives a result.

    Examples:
      infradoctor profile -- python train.py --epochs 1
      infradoctor profile --steps 200 --json out.json -- python -m mypkg.infer
      infradoctor profile --load-url http://127.0.0.1:8000/predict --load-body req.json -- python server.py
    """

    name = "profile"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Arguments."""
        limit = parser.add_mutually_exclusive_group()
        limit.add_argument("--steps", type=int, metavar="N", help="stop the workload after N steps")
        limit.add_argument("--duration", type=float, metavar="S", help="stop the workload after S seconds")
        parser.add_argument("--sample-interval", type=float, default=0.5, metavar="S",
                            help="system sampling period in seconds (default 0.5)")
        parser.add_argument("--save-evidence", type=Path, metavar="FILE",
                            help="also write what was measured (JSON) to FILE, to judge it again later")
        parser.add_argument("--evidence", type=Path, metavar="FILE",
                            help="judge a run saved with --save-evidence instead of running a workload")
        add_load_options(parser)
        add_result_options(parser)
        parser.add_argument("workload", nargs=argparse.REMAINDER,
                            help="the command to profile, after --: python script.py ARGS | python -m module ARGS")

    def run(self, args: argparse.Namespace) -> int:
        """Profile the workload and report."""
        from infradoctor.profile.metrics import ProfileMetrics
        from infradoctor.profile.result import run

        argv = list(args.workload)
        if argv and argv[0] == "--":
            argv = argv[1:]
        if args.evidence is not None:
            if argv or args.load_url:
                raise UsageError("--evidence judges a saved run: give no workload or --load-url with it")
            return finish(args, _judge_saved(args.evidence))
        if not argv:
            raise UsageError("give the workload after --, e.g. `infradoctor profile -- python train.py`")
        if args.load_url:
            return run_with_load(args, argv)
        if args.steps is not None and args.steps < 1:
            raise UsageError("--steps must be at least 1")
        if args.duration is not None and args.duration <= 0:
            raise UsageError("--duration must be positive")
        result = run(run_options(args, argv))
        started = not any(e.source == "profile.start" for e in result.errors)
        if not started:
            raise TargetError(next(e.message for e in result.errors if e.source == "profile.start"))
        code = finish(args, result)
        stop_reason = ProfileMetrics.from_dict(result.metrics).workload.stop_reason
        if result.exit_status and stop_reason not in ("steps", "duration"):
            return result.exit_status  # the workload's own failure (or 128+signal) comes first
        return code


def run_options(args: argparse.Namespace, argv: list[str]) -> ProfileRunOptions:
    """The library's options from the arguments (``--load-url`` adds its own)."""
    from infradoctor.profile.result import ProfileRunOptions
    from infradoctor.profile.rules import RuleOptions

    return ProfileRunOptions(
        argv=tuple(argv),
        max_steps=args.steps,
        duration_s=args.duration,
        sample_interval_s=max(0.05, args.sample_interval),
        rule_options=RuleOptions(cwd=os.getcwd()),
        on_evidence=evidence_saver(args),
        # with --json - our stdout carries the result: the workload's stdout goes to stderr instead
        stdout=_stderr_fd() if args.json == "-" else None,
    )


def _stderr_fd() -> int:
    """Our stderr's file descriptor (2 when sys.stderr is not a file, e.g. captured in-process)."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return 2


def evidence_saver(args: argparse.Namespace) -> Callable[[dict[str, Any]], None] | None:
    """Writes the run's evidence bundle to ``--save-evidence`` (a failure to write is a warning, not an error)."""
    target: Path | None = args.save_evidence
    if target is None:
        return None

    def save(bundle: dict[str, Any]) -> None:
        try:
            target.write_text(json.dumps(bundle, separators=(",", ":")), encoding="utf-8")
        except OSError as exc:
            print(f"infradoctor profile: cannot write {printable(str(target))}: {exc}", file=sys.stderr)

    return save


def _judge_saved(path: Path) -> Result:
    from infradoctor.bounded import load_json
    from infradoctor.profile.rules import RuleOptions
    from infradoctor.profile_load.run import judge_bundle

    try:
        bundle = load_json(path.read_text(encoding="utf-8"), max_chars=MAX_EVIDENCE_CHARS)
        return judge_bundle(bundle, RuleOptions(cwd=os.getcwd()))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise TargetError(f"cannot judge {printable(str(path))}: {exc}") from None


MAX_EVIDENCE_CHARS = 256 * 1024 * 1024
"""Largest evidence file read back (a long run keeps at most 100,000 steps)."""

COMMAND = ProfileCommand()
