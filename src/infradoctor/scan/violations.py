"""What a scan reports per file: findings (violations), files that could not be checked, fixes written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infradoctor.findings import Severity, catalog

FIX_ONLY_PROBLEMS = frozenset({"fix-failed"})
"""Problem kinds about ``--fix`` only: the file itself was checked."""


@dataclass(frozen=True)
class Violation:
    """One finding in one file, after suppression and configuration."""

    code: str
    """Rule code, e.g. ``C003``."""
    path: str
    """File path as displayed (relative to the working directory when under it)."""
    line: int
    """1-based line."""
    column: int
    """1-based column in characters."""
    end_line: int
    """1-based end line."""
    end_column: int
    """1-based end column (exclusive) in characters."""
    message: str
    """One-line message."""
    evidence: dict[str, Any]
    """What the rule saw."""
    function: str | None
    """Enclosing function, when any."""
    line_text: str
    """The source line (stripped), for fingerprints."""
    fixable: bool = False
    """``--fix`` can fix it (safely; unsafe fixes need ``--unsafe-fixes``)."""
    severity: Severity | None = None
    """Severity when it differs from the rule's default."""
    unsafe_fix: bool = False
    """A fix exists but may change behaviour: ``--unsafe-fixes`` applies it."""

    @property
    def name(self) -> str:
        """Stable kebab-case name of the code."""
        return catalog()[self.code].name


@dataclass(frozen=True)
class FileProblem:
    """A file that could not be scanned (fully): parse error, bad encoding, too large, unreadable, missing."""

    path: str
    """File path as displayed."""
    kind: str
    """``parse-error``, ``decode-error``, ``too-large``, ``too-complex``, ``unreadable``, ``not-found``,
    ``symlink-loop``, ``fix-failed``, ``internal-error``."""
    message: str
    """Human-readable reason."""
    line: int | None = None
    """1-based line, for parse errors."""
    column: int | None = None
    """1-based column, for parse errors."""


@dataclass(frozen=True)
class AppliedFix:
    """A safe fix that ``--fix`` wrote to a file."""

    path: str
    """File path as displayed."""
    line: int
    """1-based line of the fixed finding."""
    code: str
    """Code of the fixed finding."""
    description: str
    """What changed."""
