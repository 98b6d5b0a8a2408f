"""Human sections of a scan result (terminal, Markdown, HTML renderers show them)."""

from __future__ import annotations

from collections.abc import Mapping

from infradoctor.findings import catalog
from infradoctor.report.sections import Section, Table
from infradoctor.result import Result


def sections(result: Result) -> list[Section]:
    """Findings per rule, the files with most findings, and what the scan covered."""
    metrics = result.metrics if isinstance(result.metrics, Mapping) else {}
    out: list[Section] = []
    by_code = metrics.get("by_code") or {}
    tables = []
    if by_code:
        rows = [(code, catalog()[code].name if code in catalog() else "", int(count))
                for code, count in by_code.items()]
        tables.append(Table(columns=("code", "name", "findings"), rows=rows, title="Findings by rule"))
    by_file = metrics.get("by_file") or {}
    if by_file:
        tables.append(Table(columns=("file", "findings"), rows=[(f, int(n)) for f, n in list(by_file.items())[:10]],
                            title="Files with most findings"))
    fixes = metrics.get("fixes") or []
    if fixes:
        tables.append(Table(columns=("file", "line", "code", "change"),
                            rows=[(f["file"], f["line"], f["code"], f["description"]) for f in fixes],
                            title="Fixes applied"))
    headline = metrics.get("headline") or {}
    lines = [f"{headline.get('files_scanned', 0)} files, {headline.get('lines_scanned', 0)} lines scanned"
             f"; {headline.get('suppressed', 0)} findings suppressed by noqa"]
    problems = int(headline.get("file_problems") or 0)
    if problems:
        lines.append(f"{problems} file problem{'s' if problems != 1 else ''} (could not be read, decoded, parsed "
                     "or fixed): see the errors")
    if metrics.get("config"):
        lines.append("configuration: " + ", ".join(metrics["config"]))
    out.append(Section(title="Static checks", tables=tables, lines=lines))
    return out
