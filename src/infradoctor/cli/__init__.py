"""The command line: the only package that parses arguments, prints, or exits.

Subcommands are objects in one list (:data:`COMMAND_MODULES`); each module under ``cli/`` defines ``COMMAND``.
``main(argv) -> int`` makes the CLI testable in-process.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence

from infradoctor import __version__
from infradoctor.cli.base import Command
from infradoctor.errors import EXIT_INTERRUPTED, EXIT_TARGET, EXIT_USAGE, InfradoctorError

# One module per command, in the order `--help` lists them. A module that is not there yet is skipped.
COMMAND_MODULES: tuple[str, ...] = (
    "node",
    "profile",
    "load",
    "route",
    "logs",
    "scan",
    "report",
    "compare",
    "demo",
    "runs",
    "show",
    "rules",
)


def load_commands() -> list[Command]:
    """The command objects of every command module that exists."""
    commands: list[Command] = []
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"infradoctor.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"infradoctor.cli.{name}":
                continue
            raise
        commands.append(module.COMMAND)
    return commands


def build_parser(commands: Sequence[Command] | None = None) -> argparse.ArgumentParser:
    """The top-level parser with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="infradoctor",
        description="Find out why an AI workload is slow or failing, and prove the fix: "
        "baseline, diagnose, improve, write up.",
    )
    parser.add_argument("--version", action="version", version=f"infradoctor {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in commands if commands is not None else load_commands():
        sub = subparsers.add_parser(
            command.name,
            help=command.summary,
            description=command.description,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.prepare_parser(sub)
        sub.set_defaults(_command=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code instead of exiting."""
    parser = build_parser()
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:  # argparse exits on --help/--version (0) and usage errors (2)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    command: Command | None = getattr(args, "_command", None)
    if command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return command.run(args)
    except InfradoctorError as exc:
        print(f"infradoctor {command.name}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"infradoctor {command.name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_TARGET


def _terminate_as_interrupt(signum: int, frame: object) -> None:
    # SIGTERM (CI timeouts, `kill`, container stop) takes the same path as Ctrl-C: workloads and servers we
    # started are stopped and the partial result is written.
    raise KeyboardInterrupt(f"signal {signum}")


def console_main() -> None:
    """Entry point of the ``infradoctor`` console script."""
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    sys.exit(main())
