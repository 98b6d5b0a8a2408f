"""``infradoctor scan``: static checks for AI-serving and PyTorch anti-patterns."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from infradoctor.bounded import json_printable, printable
from infradoctor.cli.base import Command, add_result_options, finish
from infradoctor.errors import EXIT_FINDINGS, EXIT_USAGE, UsageError

if TYPE_CHECKING:
    from infradoctor.scan.engine import ScanReport


def _codes(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [code.strip() for value in values for code in value.split(",") if code.strip()]


def _exit_code(report: ScanReport, code: int, *, listed: bool) -> int:
    """2 when a named path does not exist, at least 1 when a file could not be checked, else ``code``.

    A missing path is said once: in the linter text when that goes to the terminal (``listed``), else on stderr.
    """
    if not listed:
        for problem in report.missing:
            print(f"infradoctor scan: error: {printable(problem.path)}: no such file or directory", file=sys.stderr)
    if report.missing:
        return EXIT_USAGE
    if report.unchecked:
        return max(code, EXIT_FINDINGS)
    return code


class ScanCommand(Command):
    """Static checks for AI-serving and PyTorch anti-patterns (codes C001-C014).

    Finds models loaded per request or per loop iteration, blocking calls in async handlers, inference without
    no_grad/inference_mode, host syncs and per-sample model calls in hot loops, tensors kept with their graph,
    DataLoader settings, empty_cache() as a fix, several workers each holding a GPU model, and unsafe torch.load.
    `infradoctor rules C003` explains a code.

    Suppress one line with `# noqa: C003` (or a bare `# noqa`); configure in pyproject.toml:
      [tool.infradoctor.scan]
      select = ["C0"]            # code prefixes
      ignore = ["C012"]
      per-file-ignores = {"tests/*" = ["C009"]}
      exclude = ["build/*"]
    --fix applies safe fixes only: C014 adds weights_only=True where the loaded object is used as a state dict
    (--unsafe-fixes also where it may hold other objects); it rewrites a file atomically (a temporary file, then a
    rename) and keeps its permissions. Test modules (test_*.py, conftest.py) get only C013 and C014 unless
    --include-tests. Like other linters, a scan is not stored as a run unless asked (--save or --store DIR).

    A file that cannot be read, decoded or parsed is reported as an error line (`path: error: parse-error: ...`)
    and the rest is still checked; it is never passed silently.
    Exit status: 0 when everything was checked and nothing was found; 1 when findings remain (like other linters;
    --fail-on changes the threshold) or a file could not be checked; 2 for usage or configuration errors,
    including a PATH that does not exist (the other paths are still checked and reported).
    """

    name = "scan"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Arguments."""
        parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories to check")
        parser.add_argument("--select", action="append", metavar="CODES",
                            help="only these codes or prefixes, comma-separated (e.g. C0 or C003,C014)")
        parser.add_argument("--ignore", action="append", metavar="CODES", help="skip these codes or prefixes")
        parser.add_argument("--format", choices=("text", "json", "sarif"), default="text", help="output format")
        parser.add_argument("--output", "-o", metavar="PATH", help="write the output to PATH instead of stdout")
        parser.add_argument("--fix", action="store_true", help="apply safe fixes in place (C014) and report them")
        parser.add_argument("--unsafe-fixes", action="store_true",
                            help="with --fix, also apply fixes that may change behaviour")
        parser.add_argument("--include-tests", action="store_true",
                            help="run every rule on test modules too (default: only C013 and C014)")
        parser.add_argument("--no-config", action="store_true", help="ignore [tool.infradoctor.scan] in pyproject.toml")
        parser.add_argument("--save", action="store_true",
                            help="store this scan as a run (default: not stored, like other linters; --store DIR "
                                 "also stores)")
        add_result_options(parser, default_fail_on="info")
        parser._option_string_actions["--no-store"].help = "do not store this run (the default for scan)"

    def run(self, args: argparse.Namespace) -> int:
        """Scan, write the chosen format, store the run; exit 1 on findings or unchecked files, 2 on missing paths."""
        from infradoctor.result import utc_now_iso
        from infradoctor.scan.config import ConfigError
        from infradoctor.scan.engine import ScanOptions, scan_paths
        from infradoctor.scan.output import format_text, to_result
        from infradoctor.scan.sarif import to_sarif

        if args.format == "json" and args.json and args.output and args.json != args.output:
            raise UsageError("--format json writes the result; use either --output or --json")
        if args.json == "-" and args.format != "json" and not args.output:
            raise UsageError(f"--json - and --format {args.format} would both write to stdout; add --output PATH")
        started_at = utc_now_iso()
        options = ScanOptions(select=_codes(args.select), ignore=_codes(args.ignore), fix=args.fix,
                              unsafe_fixes=args.unsafe_fixes, include_tests=args.include_tests,
                              use_config=not args.no_config)
        try:
            report = scan_paths(args.paths, options)
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
        result = to_result(report, started_at=started_at, paths=args.paths)
        finish_args = argparse.Namespace(**vars(args))
        finish_args.quiet = True  # the linter output below is the human output
        finish_args.no_store = not (args.save or args.store)  # linters do not keep runs unless asked
        if args.format == "json":
            finish_args.json = args.output or args.json or "-"
            return _exit_code(report, finish(finish_args, result), listed=False)
        if args.format == "sarif":
            text = json_printable(json.dumps(to_sarif(report), indent=2, ensure_ascii=False)) + "\n"
        else:
            text = format_text(report, summary=not args.quiet)
        if args.output:
            try:
                Path(args.output).write_text(text, encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"cannot write --output {args.output}: {exc.strerror or exc}") from None
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
        return _exit_code(report, finish(finish_args, result), listed=args.format == "text" and not args.output)


COMMAND = ScanCommand()
