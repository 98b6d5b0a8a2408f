"""``infradoctor runs``: list stored runs."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from infradoctor.bounded import printable
from infradoctor.cli.base import Command, add_store_option, open_store
from infradoctor.errors import EXIT_OK

if TYPE_CHECKING:
    pass


class RunsCommand(Command):
    """List stored runs, newest first: id, command, label, start time, target, findings, headline metrics."""

    name = "runs"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Arguments."""
        parser.add_argument("--command", dest="only_command", help="only runs of this command")
        parser.add_argument("--label", help="only runs with this label")
        parser.add_argument("--limit", type=int, default=50, help="at most this many runs (default 50)")
        parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
        add_store_option(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Print the list."""
        from infradoctor.report.sections import format_value

        store = open_store(args)
        runs = store.list(command=args.only_command, label=args.label, limit=args.limit)
        if args.format == "json":
            rows = [
                {
                    "id": r.id,
                    "command": r.command,
                    "label": r.label,
                    "note": r.note,
                    "started_at": r.started_at,
                    "duration_s": r.duration_s,
                    "target": r.target,
                    "findings": r.findings,
                    "worst": r.worst,
                    "headline": dict(r.headline),
                }
                for r in runs
            ]
            sys.stdout.write(json.dumps(rows, indent=2) + "\n")
            return EXIT_OK
        if not runs:
            sys.stderr.write(f"no runs stored in {store.root}\n")
            return EXIT_OK
        for r in runs:
            head = ", ".join(f"{k}={format_value(v)}" for k, v in list(r.headline.items())[:4])
            label = r.label or "-"
            worst = f"{r.findings} ({r.worst})" if r.worst else str(r.findings)
            target = r.target if len(r.target) <= 48 else r.target[:47] + "…"
            line = f"{r.id}  {r.command:8} {label:10} {r.started_at}  findings={worst:12} {target}  {head}"
            sys.stdout.write(printable(line) + "\n")
        return EXIT_OK


COMMAND = RunsCommand()
