"""``infradoctor compare BEFORE AFTER``: before -> after per metric, with confidence intervals."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from infradoctor.cli.base import Command, add_store_option, open_store, print_result
from infradoctor.errors import EXIT_FINDINGS, EXIT_OK, UsageError

if TYPE_CHECKING:
    pass


class CompareCommand(Command):
    """Compare two stored runs: per metric before, after, change, and whether it is beyond noise.

    BEFORE and AFTER are run references (an id, a unique prefix, `latest`, `latest-1`, or a label such as
    `baseline` / `after`). Where both runs stored raw samples (latencies, step times), the change in mean, p50 and
    p99 gets a seeded bootstrap 95% confidence interval; a change is significant when the interval excludes zero.
    Regressions (significant changes in the bad direction) are called out; `--fail-on-regression` exits 1 on one.
    """

    name = "compare"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Arguments."""
        parser.add_argument("before", help="the run before the change (e.g. baseline)")
        parser.add_argument("after", help="the run after the change (e.g. after)")
        parser.add_argument(
            "--format", choices=("terminal", "json", "md", "html"), default="terminal", help="output format"
        )
        parser.add_argument("--json", metavar="PATH", help="also write the comparison JSON to PATH ('-': stdout)")
        parser.add_argument("-o", "--output", type=Path, help="write the formatted output to this file")
        parser.add_argument("--resamples", type=int, default=400, help="bootstrap resamples (default 400)")
        parser.add_argument("--fail-on-regression", action="store_true", help="exit 1 when a metric regressed")
        add_store_option(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Load both runs and print the comparison."""
        from infradoctor.compare import compare_results
        from infradoctor.report import render

        if args.resamples < 50:
            raise UsageError("--resamples must be at least 50")
        store = open_store(args)
        before, after = store.load(args.before), store.load(args.after)
        result = compare_results(before, after, resamples=args.resamples)
        try:
            if args.json == "-":
                sys.stdout.write(result.to_json() + "\n")
            elif args.json:
                Path(args.json).write_text(result.to_json() + "\n", encoding="utf-8")
            if args.output:
                args.output.write_text(render(result, "md" if args.format == "terminal" else args.format), "utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write the comparison: {exc}") from exc
        if not args.output and args.format == "terminal":
            print_result(result, sys.stderr if args.json == "-" else sys.stdout)
        elif not args.output and args.json != "-":
            sys.stdout.write(render(result, args.format))
        regressions = int(result.metrics["headline"]["regressions"])
        return EXIT_FINDINGS if args.fail_on_regression and regressions else EXIT_OK


COMMAND = CompareCommand()
