"""The scan command's typed metrics (``Result.metrics`` of ``infradoctor scan``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from infradoctor.metrics import Metrics


@dataclass(frozen=True)
class ScanHeadline(Metrics):
    """What the scan covered and found."""

    findings: int
    """Findings reported (after ``# noqa`` and configuration)."""
    files_scanned: int
    """Python and launcher files read."""
    lines_scanned: int
    """Lines in those files."""
    file_problems: int = 0
    """Files that could not be scanned (parse errors, bad encoding, too large, unreadable, missing)."""
    suppressed: int = 0
    """Findings silenced by ``# noqa``."""
    fixes_applied: int = 0
    """Safe fixes written by ``--fix``."""
    lines_per_s: float | None = None
    """Scan speed; None when the scan took no measurable time."""


@dataclass(frozen=True)
class AppliedFix(Metrics):
    """One change ``--fix`` wrote."""

    file: str
    """The file changed."""
    line: int
    """1-based line of the change."""
    code: str
    """The finding code it fixes."""
    description: str
    """What was changed."""


@dataclass(frozen=True)
class ScanMetrics(Metrics):
    """Metrics of ``infradoctor scan``."""

    headline: ScanHeadline
    """The totals."""
    by_code: dict[str, int] = field(default_factory=dict)
    """Findings per code."""
    by_file: dict[str, int] = field(default_factory=dict)
    """Findings per file, for the files with most findings."""
    fixes: tuple[AppliedFix, ...] = ()
    """Changes written by ``--fix``."""
    selected: tuple[str, ...] = ()
    """Codes that ran."""
    config: tuple[str, ...] = ()
    """pyproject.toml files that configured the scan."""
