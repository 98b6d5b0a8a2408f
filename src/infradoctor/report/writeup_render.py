"""Render a :class:`~infradoctor.report.writeup.Writeup` as Markdown or as a self-contained HTML page."""

from __future__ import annotations

from html import escape

from infradoctor.bounded import printable
from infradoctor.compare.analysis import MetricChange
from infradoctor.report.charts import all_charts
from infradoctor.report.html import html_page, inline
from infradoctor.report.markdown import md_escape
from infradoctor.report.present.compare import change_text, interval_text, verdict
from infradoctor.report.sections import format_value
from infradoctor.report.writeup import Writeup, finding_line
from infradoctor.result import Result

CHANGE_COLUMNS = ("metric", "before", "after", "change", "95% CI of change", "verdict")


def change_cells(row: MetricChange) -> list[str]:
    """Cells of one before -> after row."""
    name = row.metric + (f" ({row.statistic})" if row.statistic != "value" else "")
    return [name, format_value(row.before), format_value(row.after), change_text(row), interval_text(row),
            verdict(row)]


SECTIONS = ("Summary", "Method", "Findings", "Changes made", "Risks / tradeoffs", "Recommended next steps")


def _finding_lines(writeup: Writeup) -> list[str]:
    lines = [finding_line(f, r) + (f" Fix: {f.fix}" if f.fix else "") for f, r in writeup.findings]
    return lines or ["No findings above the detection thresholds."]


def to_markdown(writeup: Writeup) -> str:
    """The report as Markdown."""
    out = [
        f"# {md_escape(writeup.title)}",
        "",
        f"*Generated {writeup.generated_at} from {len(writeup.runs)} runs.*",
        "",
    ]
    out += ["## Summary", ""] + [f"- {md_escape(s)}" for s in writeup.summary] + [""]
    out += ["## Method", ""] + [f"- {md_escape(s)}" for s in writeup.method] + [""]
    out += ["## Findings", ""] + [f"{i}. {md_escape(s)}" for i, s in enumerate(_finding_lines(writeup), 1)] + [""]
    out += ["## Changes made", ""]
    for line in writeup.changes:
        if line.startswith("    "):
            out.append(f"  - {md_escape(line.strip())}")
        else:
            out.append(f"- {md_escape(line)}")
    out.append("")
    for pair in writeup.pairs:
        rows = pair.key_changes(6)
        if not rows:
            continue
        out += [f"**{md_escape(pair.scenario or pair.after.command)}: before -> after**", ""]
        out += ["| " + " | ".join(CHANGE_COLUMNS) + " |", "|" + "---|" * len(CHANGE_COLUMNS)]
        out += ["| " + " | ".join(md_escape(c) for c in change_cells(r)) + " |" for r in rows]
        out.append("")
    out += ["## Risks / tradeoffs", ""] + [f"- {md_escape(s)}" for s in writeup.risks or ["None identified."]] + [""]
    out += ["## Recommended next steps", ""] + [f"{i}. {md_escape(s)}" for i, s in enumerate(writeup.next_steps, 1)]
    return printable("\n".join(out).rstrip() + "\n")  # no raw control character, escaped field by field or not


def to_html(writeup: Writeup) -> str:
    """The report as one self-contained HTML page with inline SVG charts."""

    def bullets(items: list[str] | tuple[str, ...], ordered: bool = False) -> str:
        tag = "ol" if ordered else "ul"
        return f"<{tag}>" + "".join(f"<li>{inline(s)}</li>" for s in items) + f"</{tag}>"

    body = [
        f"<h1>{escape(writeup.title)}</h1>",
        f"<p><i>Generated {escape(writeup.generated_at)} from {len(writeup.runs)} runs.</i></p>",
    ]
    body += ['<section id="summary"><h2>Summary</h2>', bullets(list(writeup.summary)), "</section>"]
    body += ['<section id="method"><h2>Method</h2>', bullets(list(writeup.method)), "</section>"]
    body += ['<section id="findings"><h2>Findings</h2>', bullets(_finding_lines(writeup), ordered=True), "</section>"]
    body.append('<section id="changes"><h2>Changes made</h2><ul>')
    for line in writeup.changes:
        if line.startswith("    "):
            body.append(f'<li style="list-style:circle;margin-left:1.5rem">{inline(line.strip())}</li>')
        else:
            body.append(f"<li>{inline(line)}</li>")
    body.append("</ul>")
    for pair in writeup.pairs:
        rows = pair.key_changes(6)
        if rows:
            body.append(f"<table><caption>{escape(pair.scenario or pair.after.command)}: before -&gt; after</caption>")
            body.append("<tr>" + "".join(f"<th>{escape(c)}</th>" for c in CHANGE_COLUMNS) + "</tr>")
            body += ["<tr>" + "".join(f"<td>{escape(c)}</td>" for c in change_cells(r)) + "</tr>" for r in rows]
            body.append("</table>")
    body.append("</section>")
    groups: list[tuple[str, list[Result]]] = [
        (pair.scenario or pair.after.command, [pair.before, pair.after]) for pair in writeup.pairs
    ]
    paired = {id(r) for _, runs in groups for r in runs}
    rest = [r for r in writeup.runs if id(r) not in paired]
    if rest:
        groups.append(("other runs", rest))
    chart_html = []
    for name, runs in groups:
        charts = all_charts(runs)
        if charts:
            chart_html.append(f"<h3>{escape(name)}</h3>" + "".join(f'<div class="chart">{c}</div>' for c in charts))
    if chart_html:
        body.append('<section id="charts"><h2>Charts</h2>' + "".join(chart_html) + "</section>")
    body += [
        '<section id="risks"><h2>Risks / tradeoffs</h2>',
        bullets(list(writeup.risks) or ["None identified."]),
        "</section>",
    ]
    body += [
        '<section id="next-steps"><h2>Recommended next steps</h2>',
        bullets(list(writeup.next_steps), True),
        "</section>",
    ]
    return html_page(writeup.title, "".join(body))
