"""``infradoctor show RUN``: re-render a stored run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from infradoctor.cli.base import Command, add_store_option, open_store, print_result
from infradoctor.errors import EXIT_OK, UsageError

if TYPE_CHECKING:
    pass


class ShowCommand(Command):
    """Re-render a stored run in the terminal, or as JSON, Markdown or HTML.

    RUN is a run id, a unique prefix of one, `latest`, `latest-1`, ..., or a label (its newest run).
    """

    name = "show"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Arguments."""
        parser.add_argument("run", nargs="?", default="latest", help="run reference (default: latest)")
        parser.add_argument(
            "--format", choices=("terminal", "json", "md", "html"), default="terminal", help="output format"
        )
        parser.add_argument("-o", "--output", type=Path, help="write to this file instead of stdout")
        add_store_option(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Render the run."""
        from infradoctor.report import render

        result = open_store(args).load(args.run)
        if args.format == "terminal" and not args.output:
            print_result(result, sys.stdout)
            return EXIT_OK
        text = render(result, args.format)
        if args.output:
            try:
                args.output.write_text(text, encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"cannot write {args.output}: {exc}") from exc
        else:
            sys.stdout.write(text)
        return EXIT_OK


COMMAND = ShowCommand()
