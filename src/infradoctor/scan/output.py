"""Scan output: linter-style text and the result (JSON contract) built from a :class:`ScanReport`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from infradoctor.bounded import printable
from infradoctor.findings import Finding, Location, make_finding
from infradoctor.result import ErrorNote, Result, new_result
from infradoctor.scan.engine import FileProblem, ScanReport, Violation
from infradoctor.scan.metrics import AppliedFix, ScanHeadline, ScanMetrics

BY_FILE_LIMIT = 50
"""How many files ``metrics.by_file`` lists (those with most findings)."""


def format_violation(v: Violation) -> str:
    """``path:line:col: CODE message`` (``[*]`` marks findings ``--fix`` can fix)."""
    mark = " [*]" if v.fixable else ""
    return f"{v.path}:{v.line}:{v.column}: {v.code}{mark} {v.message}"


def format_problem(p: FileProblem) -> str:
    """``path[:line[:col]]: error: kind: message``."""
    where = p.path
    if p.line is not None:
        where += f":{p.line}"
        if p.column is not None:
            where += f":{p.column}"
    return f"{where}: error: {p.kind}: {p.message}"


def format_text(report: ScanReport, *, summary: bool = True) -> str:
    r"""The report as linter lines, problems, applied fixes and (optionally) a summary.

    Control characters in what the scanned tree holds (a file named with an escape sequence, a message quoting
    its code) are shown as escapes (``\x1b``): the text goes to a terminal; a newline in a name stays in its line.
    """
    lines = [format_violation(v) for v in report.violations]
    lines.extend(format_problem(p) for p in report.problems)
    if summary:
        lines.extend(f"{f.path}:{f.line}: fixed {f.code}: {f.description}" for f in report.fixes)
        lines.append(verdict(report))
        extra = []
        if report.fixes:
            extra.append(f"fixed {len(report.fixes)}")
        if report.suppressed:
            extra.append(f"{report.suppressed} suppressed by noqa")
        if report.problems:
            extra.append(f"{len(report.problems)} file problem{'s' if len(report.problems) != 1 else ''}")
        files = f"{report.files_scanned} file{'s' if report.files_scanned != 1 else ''}"
        lines.append(f"Scanned {files}, {_plural(report.lines_scanned, 'line')} in "
                     f"{report.duration_s:.2f} s" + (f" ({', '.join(extra)})" if extra else "") + ".")
    return "".join(printable(line).replace("\n", "\\n") + "\n" for line in lines)  # one line each


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def verdict(report: ScanReport) -> str:
    """The one-line outcome: findings, paths or files that could not be checked, or "All checks passed."."""
    count = len(report.violations)
    fixable = sum(v.fixable for v in report.violations)
    unchecked = report.unchecked
    parts = []
    if count:
        parts.append(f"Found {_plural(count, 'finding')}" + (f" ({fixable} fixable with --fix)" if fixable else ""))
    if report.missing:
        parts.append(f"{_plural(len(report.missing), 'path')} not found")
    if len(unchecked) > len(report.missing):
        parts.append(f"{_plural(len(unchecked) - len(report.missing), 'file')} could not be checked "
                     "(errors above)")
    if parts:
        text = "; ".join(parts)
        if not count and unchecked:
            text = "No findings in the checked files, but " + text
        return text[0].upper() + text[1:] + "."
    if report.files_scanned == 0:
        return "No Python files found."
    return "All checks passed."


def to_finding(v: Violation) -> Finding:
    """A violation as a finding of the result contract."""
    evidence = {k: val for k, val in v.evidence.items() if val is not None}
    evidence["source"] = v.line_text[:200]
    if v.fixable:
        evidence["fixable"] = True
    return make_finding(v.code, v.message, evidence, severity=v.severity,
                        location=Location(v.path, v.line, v.column, v.function))


def to_result(report: ScanReport, *, started_at: str, paths: Sequence[str]) -> Result:
    """The scan as a result: findings, problems as errors, and the documented metrics."""
    by_code = Counter(v.code for v in report.violations)
    by_file = Counter(v.path for v in report.violations)
    lines_per_s = report.lines_scanned / report.duration_s if report.duration_s > 0 else None
    metrics = ScanMetrics(
        headline=ScanHeadline(
            findings=len(report.violations),
            files_scanned=report.files_scanned,
            lines_scanned=report.lines_scanned,
            file_problems=len(report.problems),
            suppressed=report.suppressed,
            fixes_applied=len(report.fixes),
            lines_per_s=round(lines_per_s, 1) if lines_per_s is not None else None,
        ),
        by_code=dict(sorted(by_code.items())),
        by_file=dict(by_file.most_common(BY_FILE_LIMIT)),
        fixes=tuple(AppliedFix(f.path, f.line, f.code, f.description) for f in report.fixes),
        selected=tuple(report.selected),
        config=tuple(report.config_sources),
    )
    errors = [ErrorNote(f"scan:{p.kind}", format_problem(p)) for p in report.problems]
    return new_result(
        "scan",
        started_at=started_at,
        duration_s=report.duration_s,
        target={"paths": list(paths)},
        metrics=metrics.to_dict(),
        findings=[to_finding(v) for v in report.violations],
        errors=errors,
    )
