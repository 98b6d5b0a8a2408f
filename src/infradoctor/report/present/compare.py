"""Tables for a compare result: one row per metric, with the change and what can be said about it."""

from __future__ import annotations

from infradoctor.compare.analysis import CompareMetrics, MetricChange
from infradoctor.report.sections import Section, Table, format_value
from infradoctor.result import Result


def verdict(row: MetricChange) -> str:
    """The row's verdict in words (``better``, ``REGRESSION``, ``within noise``, ``higher, no interval`` ...)."""
    return row.verdict


def interval_text(row: MetricChange) -> str:
    """``[-67.5, -15.7] (n=800/790)`` or ``–`` without an interval."""
    if row.ci_low is None or row.ci_high is None:
        return "–"
    n = f" (n={row.n_before}/{row.n_after})" if row.n_before is not None else ""
    return f"[{format_value(row.ci_low, signed=True)}, {format_value(row.ci_high, signed=True)}]{n}"


def change_text(row: MetricChange) -> str:
    """``-44%``, or the absolute change where the relative one is undefined."""
    if row.change_pct is not None:
        return f"{row.change_pct:+.0f}%" if abs(row.change_pct) >= 10 else f"{row.change_pct:+.1f}%"
    return format_value(row.change, signed=True)


def sections(result: Result) -> list[Section]:
    """The comparison table, regressions first; counts of what could and could not be judged."""
    metrics = CompareMetrics.from_dict(result.metrics)
    order = {"regression": 0, "improvement": 1, "within_noise": 2, "not_judged": 3, "not_comparable": 4}
    rows = sorted(metrics.changes, key=lambda r: (order.get(r.kind, 5), r.metric, r.statistic))
    table_rows = [
        (r.metric, r.statistic, r.before, r.after, change_text(r), interval_text(r), verdict(r)) for r in rows
    ]
    head = metrics.headline
    lines = [
        f"before: {metrics.before.run_id} [{metrics.before.label or '-'}] {metrics.before.command}",
        f"after:  {metrics.after.run_id} [{metrics.after.label or '-'}] {metrics.after.command}",
        f"{head.improvements} better and {head.regressions} worse beyond noise, {head.within_noise} within noise; "
        f"{head.not_judged} not judged (no usable interval: one value per run or too few samples)"
        + (f"; {head.not_comparable} not comparable" if head.not_comparable else ""),
    ]
    for gone in metrics.findings_gone:
        lines.append(f"no longer found: {gone.code}" + (f" ({gone.reason})" if gone.reason else ""))
    if metrics.findings_new:
        lines.append("new findings: " + ", ".join(metrics.findings_new))
    lines += [f"WARNING: {w}" for w in metrics.warnings]
    lines += [f"note: {n}" for n in sorted({r.note for r in rows if r.note})]
    regressions = [r for r in rows if r.regression]
    if regressions:
        lines.append("REGRESSIONS: " + ", ".join(f"{r.metric} {r.statistic}" for r in regressions))
    return [
        Section(
            title="Before -> after",
            tables=[Table(columns=("metric", "stat", "before", "after", "change", "95% CI of change", "verdict"),
                          rows=table_rows)],
            lines=lines,
        )
    ]
