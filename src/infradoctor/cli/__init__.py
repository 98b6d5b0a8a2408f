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


class CommandRef:
    """A subcommand known by name and summary; its module is imported only when it is the one being run.

    Importing every command's module (and with it the whole library) for ``--version`` or ``scan --help`` made the
    CLI start in about a second; the table keeps start-up to the parser. A test checks each summary against its
    command's docstring.
    """

    def __init__(self, name: str, summary: str) -> None:
        self.name = name
        self.summary = summary

    def load(self) -> Command:
        """The command object (imports ``infradoctor.cli.<name>``)."""
        module = importlib.import_module(f"infradoctor.cli.{self.name}")
        command: Command = module.COMMAND
        return command


# One module per command, in the order `--help` lists them.
COMMANDS: tuple[CommandRef, ...] = (
    CommandRef("node", "Health snapshot of this machine: GPUs, Xid/ECC/throttling/PCIe, CPU, memory, disks, sockets, "
               "processes"),
    CommandRef("profile", "Run a Python workload under light instrumentation and name its bottleneck"),
    CommandRef("load", "Load-test an HTTP endpoint: sweeps, knee, corrected tails, error taxonomy, streaming timing"),
    CommandRef("route", "Is it the router or the node? Compare requests through the router with the same requests "
               "sent directly"),
    CommandRef("logs", "Find failure signatures, incidents and router-vs-upstream time in logs"),
    CommandRef("fleet", "The incident window across every node from Prometheus: the same rules per node and GPU, "
               "stragglers, onset"),
    CommandRef("scan", "Static checks for AI-serving and PyTorch anti-patterns (codes C001-C014)"),
    CommandRef("report", "Write the report from stored runs: Summary, Method, Findings, Changes made, Risks / "
               "tradeoffs, Next steps"),
    CommandRef("compare", "Compare two stored runs: per metric before, after, change, and whether it is beyond noise"),
    CommandRef("demo", "Run the method end to end on bundled sick workloads: baseline, diagnose, fix, measure again, "
               "report"),
    CommandRef("runs", "List stored runs, newest first: id, command, label, start time, target, findings, headline "
               "metrics"),
    CommandRef("show", "Re-render a stored run in the terminal, or as JSON, Markdown or HTML"),
    CommandRef("rules", "List every finding code (code, name, group, severity, commands), or explain one"),
)
COMMAND_MODULES: tuple[str, ...] = tuple(ref.name for ref in COMMANDS)


def load_commands() -> list[Command]:
    """The command objects of every command (imports them all)."""
    return [ref.load() for ref in COMMANDS]


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (the first argument that is not an option), if any."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg
    return None


def build_parser(
    commands: Sequence[Command] | None = None, argv: Sequence[str] | None = None
) -> argparse.ArgumentParser:
    """The top-level parser with one subparser per command.

    With ``argv``, only the command it names is imported and given its arguments; the others appear in the
    command list by name and summary. Without it (or with ``commands``) every command is complete.
    """
    parser = argparse.ArgumentParser(
        prog="infradoctor",
        description="Find out why an AI workload is slow or failing, and prove the fix: "
        "baseline, diagnose, improve, write up.",
    )
    parser.add_argument("--version", action="version", version=f"infradoctor {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    loaded = {c.name: c for c in commands} if commands is not None else None
    chosen = _chosen(argv) if argv is not None and loaded is None else None
    for ref in COMMANDS:
        if loaded is not None:
            if ref.name not in loaded:
                continue
            command: Command | None = loaded[ref.name]
        elif argv is None or ref.name == chosen:
            command = ref.load()
        else:
            command = None
        if command is None:
            subparsers.add_parser(ref.name, help=ref.summary, add_help=False)
            continue
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
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv=args_list)
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
        from infradoctor.bounded import printable

        print(f"infradoctor {command.name}: error: {printable(str(exc))}", file=sys.stderr)
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
    try:
        code = main()
    except KeyboardInterrupt:  # Ctrl-C while starting up (imports, parsing): no traceback
        print("infradoctor: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    sys.exit(code)
