"""``infradoctor rules``: list the finding catalog or explain one code."""

from __future__ import annotations

import argparse
import json
import sys

from infradoctor.cli.base import Command
from infradoctor.errors import EXIT_OK, UsageError


class RulesCommand(Command):
    """List every finding code (code, name, group, severity, commands), or explain one.

    `infradoctor rules` lists the catalog; `infradoctor rules P001` (or `rules data-starvation`) explains one
    code from its rule's documentation: what it detects, why it matters, how it is measured (with the thresholds'
    values), and the fix.
    """

    name = "rules"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Arguments."""
        parser.add_argument("code", nargs="?", help="a code (P001) or name (data-starvation) to explain")
        parser.add_argument("--group", choices=("C", "N", "P", "R", "S"), help="only codes of one group")
        parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")

    def run(self, args: argparse.Namespace) -> int:
        """Print the catalog or one entry."""
        from infradoctor.findings import UnknownCodeError, catalog, rule

        if args.code:
            try:
                entry = rule(args.code)
            except UnknownCodeError as exc:
                raise UsageError(str(exc.args[0])) from None
            doc = entry.doc
            if args.format == "json":
                payload = {
                    "code": entry.code,
                    "name": entry.name,
                    "group": entry.group,
                    "severity": entry.severity.value,
                    "title": entry.title,
                    "commands": list(entry.commands),
                    "preview": entry.preview,
                    "fix": entry.fix,
                    "risk": entry.risk,
                    "doc": doc,
                    "sections": entry.sections(),
                }
                sys.stdout.write(json.dumps(payload, indent=2) + "\n")
                return EXIT_OK
            preview = ", preview: off unless selected" if entry.preview else ""
            lines = [
                f"{entry.code} {entry.name} ({entry.severity.value}, emitted by {', '.join(entry.commands)}{preview})",
                entry.title,
                "",
                doc or f"Fix: {entry.fix}",
                "",
                f"Risk: {entry.risk}",
            ]
            sys.stdout.write("\n".join(lines).rstrip() + "\n")
            return EXIT_OK
        entries = [e for e in catalog().values() if not args.group or e.group == args.group]
        if args.format == "json":
            rows = [
                {
                    "code": e.code,
                    "name": e.name,
                    "group": e.group,
                    "severity": e.severity.value,
                    "title": e.title,
                    "commands": list(e.commands),
                    "preview": e.preview,
                }
                for e in entries
            ]
            sys.stdout.write(json.dumps(rows, indent=2) + "\n")
            return EXIT_OK
        for e in entries:
            title = e.title + (" (preview)" if e.preview else "")
            sys.stdout.write(f"{e.code}  {e.name:28} {e.severity.value:8} {', '.join(e.commands):14} {title}\n")
        return EXIT_OK


COMMAND = RulesCommand()
