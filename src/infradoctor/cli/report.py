"""``infradoctor report``: the 1-2 page write-up from stored runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infradoctor.bounded import printable
from infradoctor.cli.base import Command, add_store_option, open_store
from infradoctor.errors import EXIT_OK, StoreError, UsageError


class ReportCommand(Command):
    """Write the report from stored runs: Summary, Method, Findings, Changes made, Risks / tradeoffs, Next steps.

    Runs pair up by label: `baseline` (or `X-baseline`, `before`) with the next `after` (`X-after`, `fixed`) of
    the same command, and each pair gets `metric before -> metric after` with confidence intervals. Without RUN
    arguments or --label, the report covers the newest runs in the store (--limit). HTML is self-contained (inline
    CSS and SVG charts, no network).
    """

    name = "report"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Arguments."""
        parser.add_argument("runs", nargs="*", metavar="RUN", help="run references (ids, prefixes, labels, latest)")
        parser.add_argument("--label", action="append", default=[], help="include runs with this label (repeatable)")
        parser.add_argument("--format", choices=("md", "html"), help="output format (default: from -o, else md)")
        parser.add_argument("-o", "--output", type=Path, help="write the report to this file (default: stdout)")
        parser.add_argument("--title", default="infradoctor report", help="report title")
        parser.add_argument("--limit", type=int, default=20, help="newest runs to use without RUN/--label")
        add_store_option(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Build and write the report."""
        from infradoctor.report.writeup import build_writeup
        from infradoctor.report.writeup_render import to_html, to_markdown

        store = open_store(args)
        refs: list[str] = list(args.runs)
        for label in args.label:
            matched = [r.id for r in store.list(label=label)]
            if not matched:
                raise UsageError(f"no run labelled {label!r} in {store.root}")
            refs += matched
        if not refs:
            refs = [r.id for r in store.list(limit=args.limit) if r.command not in ("compare",)]
        if not refs:
            raise UsageError(f"no runs stored in {store.root}; run a command first (e.g. infradoctor node)")
        seen: set[str] = set()
        results = []
        skipped: list[str] = []
        for ref in refs:
            run_id = store.resolve(ref)
            if run_id in seen:
                continue
            seen.add(run_id)
            try:
                results.append(store.load(run_id))
            except StoreError as exc:  # one damaged run must not sink the report
                skipped.append(str(exc))
                print(f"infradoctor report: warning: skipped {printable(str(exc))}", file=sys.stderr)
        if not results:
            raise UsageError("none of the selected runs could be read")
        fmt = args.format or ("html" if args.output and args.output.suffix.lower() in (".html", ".htm") else "md")
        writeup = build_writeup(results, title=args.title, skipped=skipped)
        text = to_html(writeup) if fmt == "html" else to_markdown(writeup)
        if args.output:
            try:
                args.output.parent.mkdir(parents=True, exist_ok=True)
                args.output.write_text(text, encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"cannot write {args.output}: {exc}") from exc
            print(f"wrote {printable(str(args.output))}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return EXIT_OK


COMMAND = ReportCommand()
