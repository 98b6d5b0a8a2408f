"""Errors that carry the process exit code the CLI should return.

Exit codes: 0 ok; 1 findings at or above ``--fail-on``; 2 usage error; 3 the target could not be measured;
130 interrupted (Ctrl-C or SIGTERM), after any partial result was written.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_TARGET = 3
EXIT_INTERRUPTED = 130
"""128 + SIGINT, as shells report an interrupted command; also after a partial result was written."""


class InfradoctorError(Exception):
    """Base class; ``exit_code`` is what the CLI returns when this error ends a command."""

    exit_code: int = EXIT_TARGET


class UsageError(InfradoctorError):
    """The command line or configuration is wrong (exit 2)."""

    exit_code = EXIT_USAGE


class TargetError(InfradoctorError):
    """The target could not be measured: not reachable, crashed before evidence, unreadable input (exit 3)."""

    exit_code = EXIT_TARGET


class StoreError(InfradoctorError):
    """The run store is unreadable or the run asked for does not exist (exit 2: the user named a bad run)."""

    exit_code = EXIT_USAGE


class MissingExtraError(UsageError):
    """An optional dependency is needed for this feature and is not installed."""

    def __init__(self, package: str, extra: str, feature: str) -> None:
        super().__init__(
            f"{feature} needs the optional package {package!r}; install it with "
            f"`pip install 'infradoctor[{extra}]'` (or `pip install {package}`)"
        )
        self.package = package
        self.extra = extra
