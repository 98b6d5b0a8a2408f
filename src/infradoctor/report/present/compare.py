"""Tables for a compare result: one row per metric, with the change and whether it is beyond noise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infradoctor.report.sections import Section, Table
from infradoctor.result import Result


def verdict(row: Mapping[str, Any]) -> str:
    """``better``, ``REGRESSION``, ``within noise`` or ``changed`` for one row."""
    if row.get("comparable") is False:
        return "not comparable"
    if row.get("regression"):
        return "REGRESSION"
    if row.get("improved"):
        return "better"
    if row.get("significant") is False:
        return "within noise"
    direction = row.get("direction")
    if row.get("significant") is None and direction in ("better", "worse"):
        return f"{direction}, no CI"
    return "changed" if row.get("change") else "same"


def sections(result: Result) -> list[Section]:
    """The comparison table, regressions called out first."""
    rows = [r for r in result.metrics.get("changes", []) if isinstance(r, Mapping)]
    before = result.metrics.get("before", {})
    after = result.metrics.get("after", {})
    table_rows = []
    for row in sorted(rows, key=lambda r: (not r.get("regression"), not r.get("improved"), r.get("metric", ""))):
        ci = ""
        if row.get("ci_low") is not None and row.get("ci_high") is not None:
            ci = f"[{row['ci_low']:+.3g}, {row['ci_high']:+.3g}]"
        pct = row.get("change_pct")
        table_rows.append(
            (
                row.get("metric"),
                row.get("statistic"),
                row.get("before"),
                row.get("after"),
                f"{pct:+.1f}%" if isinstance(pct, (int, float)) else "–",
                ci or "–",
                verdict(row),
            )
        )
    lines = [
        f"before: {before.get('run_id')} [{before.get('label') or '-'}] {before.get('command')}",
        f"after:  {after.get('run_id')} [{after.get('label') or '-'}] {after.get('command')}",
    ]
    resolved = result.metrics.get("findings_resolved") or []
    new = result.metrics.get("findings_new") or []
    if resolved:
        lines.append("findings resolved: " + ", ".join(map(str, resolved)))
    if new:
        lines.append("new findings: " + ", ".join(map(str, new)))
    lines += [f"WARNING: {w}" for w in result.metrics.get("warnings") or []]
    notes = sorted({str(r["note"]) for r in rows if r.get("note")})
    lines += [f"note: {n}" for n in notes]
    regressions = [r for r in rows if r.get("regression")]
    if regressions:
        lines.append("REGRESSIONS: " + ", ".join(f"{r['metric']} {r['statistic']}" for r in regressions))
    return [
        Section(
            title="Before -> after",
            tables=[Table(columns=("metric", "stat", "before", "after", "change", "95% CI of change", "verdict"),
                          rows=table_rows)],
            lines=lines,
        )
    ]
