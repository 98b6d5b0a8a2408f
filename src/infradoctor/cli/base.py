"""The Command interface and the options every diagnosing command shares."""

from __future__ import annotations

import abc
import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from infradoctor.errors import EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, StoreError, UsageError
from infradoctor.findings import Severity

if TYPE_CHECKING:  # the CLI imports what a command needs when it runs, so that --help and --version start fast
    from infradoctor.result import Result
    from infradoctor.store import RunStore


class Command(abc.ABC):
    """A subcommand: name and help come from the class and its docstring."""

    name: str = ""

    @property
    def summary(self) -> str:
        """First line of the docstring, for the command list."""
        return (self.__doc__ or "").strip().splitlines()[0].rstrip(".") if self.__doc__ else ""

    @property
    def description(self) -> str:
        """The whole docstring, for ``COMMAND --help``."""
        return (self.__doc__ or "").strip()

    @abc.abstractmethod
    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Add this command's arguments."""

    @abc.abstractmethod
    def run(self, args: argparse.Namespace) -> int:
        """Do the work; return the exit code (raise InfradoctorError for failures)."""


def add_store_option(parser: argparse.ArgumentParser) -> None:
    """``--store DIR``."""
    parser.add_argument(
        "--store",
        metavar="DIR",
        type=Path,
        help="run store directory (default: $INFRADOCTOR_HOME or ./.infradoctor)",
    )


def open_store(args: argparse.Namespace) -> RunStore:
    """The run store the user asked for."""
    from infradoctor.store import RunStore, default_store_dir

    return RunStore(args.store if getattr(args, "store", None) else default_store_dir())


def add_result_options(parser: argparse.ArgumentParser, *, default_fail_on: str | None = None) -> None:
    """Options shared by every diagnosing command: output, labels, store, exit policy."""
    group = parser.add_argument_group("result options")
    group.add_argument("--json", metavar="PATH", help="write the result JSON to PATH ('-' for stdout)")
    group.add_argument("--label", help="label for this run, e.g. baseline or after")
    group.add_argument("--note", help="free-text note stored with the run (what changed, why)")
    group.add_argument("--store", metavar="DIR", type=Path, help="run store directory (default: ./.infradoctor)")
    group.add_argument("--no-store", action="store_true", help="do not store this run")
    group.add_argument(
        "--fail-on",
        metavar="SEVERITY",
        type=fail_on_argument,
        default=default_fail_on,
        help="exit 1 when a finding at or above this severity is found (critical, high, medium, low, info)"
        + (f"; default {default_fail_on}" if default_fail_on else ""),
    )
    group.add_argument("--quiet", "-q", action="store_true", help="print no human summary")


def fail_on_argument(value: str) -> str:
    """Validate ``--fail-on`` while parsing, before anything is measured."""
    if value.lower() != "never":
        try:
            Severity.parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def parse_fail_on(value: str | None) -> Severity | None:
    """The ``--fail-on`` severity, or None."""
    if value is None or value.lower() == "never":
        return None
    try:
        return Severity.parse(value)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def summary_stream(args: argparse.Namespace) -> TextIO:
    """Human output goes to stdout unless stdout carries the JSON."""
    return sys.stderr if getattr(args, "json", None) == "-" else sys.stdout


def print_result(result: Result, stream: TextIO) -> None:
    """The terminal rendering of a result."""
    from infradoctor.report.terminal import TerminalRenderer

    color = stream.isatty() and "NO_COLOR" not in os.environ
    width = 110
    with contextlib.suppress(OSError, ValueError, AttributeError):
        width = max(80, min(160, os.get_terminal_size(stream.fileno()).columns))
    stream.write(TerminalRenderer(color=color, width=width).render([result]))
    stream.flush()


def finish(args: argparse.Namespace, result: Result) -> int:
    """Attach label/note/environment, store, write JSON, print the summary, and decide the exit code."""
    from infradoctor.bounded import printable
    from infradoctor.environment import describe_environment
    from infradoctor.redact import redact
    from infradoctor.result import ErrorNote, Result

    fail_on = parse_fail_on(getattr(args, "fail_on", None))
    result = result.with_(
        label=getattr(args, "label", None) or result.label,
        note=getattr(args, "note", None) or result.note,
        environment=result.environment or describe_environment(),
    )
    stored = False
    if not getattr(args, "no_store", False):
        try:
            result = open_store(args).save(result)
            stored = True
        except StoreError as exc:
            # The measurement is done: keep it (JSON, summary) and say the store failed.
            result = result.with_(errors=(*result.errors, ErrorNote("store", str(exc))))
            print(f"infradoctor: warning: run not stored: {printable(str(exc))}", file=sys.stderr)
    if not stored:
        result = Result.from_dict(redact(result.to_dict()))
    json_path = getattr(args, "json", None)
    if json_path == "-":
        sys.stdout.write(result.to_json() + "\n")
        sys.stdout.flush()
    elif json_path:
        try:
            Path(json_path).write_text(result.to_json() + "\n", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write --json {json_path}: {exc}") from exc
    if not getattr(args, "quiet", False):
        print_result(result, summary_stream(args))
    return exit_code_for(result, fail_on)


def parse_levels(text: str, kind: Callable[[str], Any], option: str) -> list[Any] | str:
    """Load levels from ``1,2,4,8`` (``kind`` int or float) or ``auto``; usage errors name ``option``."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        values = [kind(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise UsageError(f"cannot read {option} {text!r}; expected e.g. 1,2,4,8 or auto") from None
    if not values or any(not v > 0 or v == float("inf") for v in values):  # (also rejects nan and inf)
        raise UsageError(f"{option} levels must be positive finite numbers: {text!r}")
    return values


def positive_seconds(text: str) -> float:
    """An argparse type: a positive, finite number (durations, timeouts, rates); nan, inf and 0 are usage errors."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    return value


def parse_headers(raw: Sequence[str], option: str) -> dict[str, str]:
    """Request headers from repeated ``'Name: value'`` options; usage errors name ``option``."""
    headers: dict[str, str] = {}
    for item in raw:
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise UsageError(f"bad {option} {item!r}; expected 'Name: value'")
        headers[key.strip()] = value.strip()
    return headers


def finish_interruptible(args: argparse.Namespace, result: Result) -> int:
    """:func:`finish`, then 130 when Ctrl-C/SIGTERM cut the measurement short (an ``*.interrupted`` error note).

    The partial result is stored and written first; the exit code still tells a script that it was interrupted,
    as for the commands that have nothing partial to write.
    """
    code = finish(args, result)
    if any(note.source.endswith(".interrupted") for note in result.errors):
        return EXIT_INTERRUPTED
    return code


def exit_code_for(result: Result, fail_on: Severity | None) -> int:
    """1 when a finding reaches ``fail_on``, else 0."""
    if fail_on is None:
        return EXIT_OK
    worst = result.worst_severity()
    return EXIT_FINDINGS if worst is not None and worst.rank >= fail_on.rank else EXIT_OK
