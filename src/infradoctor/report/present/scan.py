"""Human sections of a scan result (terminal, Markdown, HTML renderers show them)."""

from __future__ import annotations

from infradoctor.findings import catalog
from infradoctor.report.sections import Section, Table
from infradoctor.result import Result
from infradoctor.scan.metrics import ScanMetrics


def sections(result: Result) -> list[Section]:
    """Findings per rule, the files with most findings, and what the scan covered."""
    metrics = ScanMetrics.from_dict(result.metrics)
    tables = []
    if metrics.by_code:
        rows = [(code, catalog()[code].name if code in catalog() else "", count)
                for code, count in metrics.by_code.items()]
        tables.append(Table(columns=("code", "name", "findings"), rows=rows, title="Findings by rule"))
    if metrics.by_file:
        tables.append(Table(columns=("file", "findings"), rows=list(metrics.by_file.items())[:10],
                            title="Files with most findings"))
    if metrics.fixes:
        tables.append(Table(columns=("file", "line", "code", "change"),
                            rows=[(f.file, f.line, f.code, f.description) for f in metrics.fixes],
                            title="Fixes applied"))
    head = metrics.headline
    lines = [f"{head.files_scanned} files, {head.lines_scanned} lines scanned"
             f"; {head.suppressed} findings suppressed by noqa"]
    if head.file_problems:
        lines.append(f"{head.file_problems} file problem{'s' if head.file_problems != 1 else ''} (could not be "
                     "read, decoded, parsed or fixed): see the errors")
    if metrics.config:
        lines.append("configuration: " + ", ".join(metrics.config))
    return [Section(title="Static checks", tables=tables, lines=lines)]
