"""A self-contained HTML page (no network): every piece of untrusted text is escaped."""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape

from infradoctor.bounded import printable
from infradoctor.report.base import Renderer
from infradoctor.report.sections import (
    Bar,
    Section,
    Table,
    command_sections,
    finding_details,
    format_value,
    headline_table,
    result_meta,
)
from infradoctor.result import Result

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1000px;
color:#1d2330;padding:0 1rem}
h1{font-size:1.5rem}h2{font-size:1.25rem;border-bottom:1px solid #dde;padding-bottom:.2rem;margin-top:2rem}
h3{font-size:1.05rem}table{border-collapse:collapse;margin:.5rem 0 1rem}
th,td{border:1px solid #dde;padding:.25rem .6rem;text-align:left;vertical-align:top}
th{background:#f3f5fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
.sev{display:inline-block;border-radius:3px;padding:0 .4rem;color:#fff;font-size:.8rem;font-weight:600}
.sev-critical{background:#8b0000}.sev-high{background:#c0392b}.sev-medium{background:#d68910}
.sev-low{background:#2874a6}.sev-info{background:#717d7e}
.finding{border:1px solid #dde;border-radius:6px;padding:.5rem .8rem;margin:.6rem 0}
.finding code,.meta code{background:#f3f5fa;padding:0 .2rem}
.bar{display:flex;height:22px;border-radius:4px;overflow:hidden;margin:.3rem 0}
.bar span{display:block;height:100%}.legend span{margin-right:1rem;font-size:.85rem}
.errors{background:#fff6e5;border:1px solid #f0c36d;padding:.5rem .8rem;border-radius:6px}
"""
PALETTE = ("#2e86c1", "#e67e22", "#27ae60", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d", "#d4ac0d")


def html_table(table: Table) -> str:
    """A table with numeric cells right-aligned."""
    parts = ["<table>"]
    if table.title:
        parts.append(f"<caption>{escape(table.title)}</caption>")
    parts.append("<tr>" + "".join(f"<th>{escape(str(c))}</th>" for c in table.columns) + "</tr>")
    for row in table.rows:
        cells = []
        for cell in row:
            cls = ' class="num"' if isinstance(cell, (int, float)) and not isinstance(cell, bool) else ""
            cells.append(f"<td{cls}>{escape(format_value(cell))}</td>")
        parts.append("<tr>" + "".join(cells) + "</tr>")
    parts.append("</table>")
    return "".join(parts)


def html_bar(bar: Bar) -> str:
    """A stacked horizontal bar with a legend."""
    total = sum(max(v, 0.0) for _, v in bar.parts) or 1.0
    spans, legend = [], []
    for i, (label, value) in enumerate(bar.parts):
        share = 100 * max(value, 0.0) / total
        color = PALETTE[i % len(PALETTE)]
        tip = escape(f"{label}: {share:.0f}%")
        spans.append(f'<span style="width:{share:.2f}%;background:{color}" title="{tip}"></span>')
        legend.append(
            f'<span><b style="color:{color}">■</b> {escape(label)} {share:.0f}% '
            f"({escape(format_value(value))}{escape(bar.unit)})</span>"
        )
    title = f"<div>{escape(bar.title)}</div>" if bar.title else ""
    return f'{title}<div class="bar">{"".join(spans)}</div><div class="legend">{"".join(legend)}</div>'


def html_section(section: Section) -> str:
    """A section with its heading."""
    parts = [f"<h3>{escape(section.title)}</h3>"]
    parts += [html_bar(b) for b in section.bars]
    parts += [html_table(t) for t in section.tables]
    if section.lines:
        parts.append("<pre>" + escape("\n".join(section.lines)) + "</pre>")
    return "".join(parts)


_CODE_SPAN = re.compile(r"`([^`\n]{1,400})`")


def inline(text: str) -> str:
    """Untrusted text as HTML: escaped, with backtick spans (``def``, `torch.inference_mode()`) as <code>."""
    return _CODE_SPAN.sub(r"<code>\1</code>", escape(text))


def html_page(title: str, body: str) -> str:
    r"""A complete document with inline CSS and no external resources.

    No raw control character is left in it (an escape sequence in a file name or a label, from any part of the
    page, charts included): each becomes a visible escape (``\x1b``, :func:`~infradoctor.bounded.printable`), so
    the page is safe to print on a terminal and valid HTML.
    """
    return printable(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        'img-src data:">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>{body}</body></html>\n"
    )


class HtmlRenderer(Renderer):
    """One page for one or more results."""

    format = "html"

    def render(self, results: Sequence[Result]) -> str:
        """A self-contained HTML document."""
        body = ["<h1>infradoctor</h1>"]
        body += [self._one(r) for r in results]
        first = results[0].command if results else "report"
        return html_page(f"infradoctor {first}", "".join(body))

    def _one(self, result: Result) -> str:
        label = f" [{result.label}]" if result.label else ""
        parts = [f"<h2>{escape(result.command)}{escape(label)}</h2>"]
        meta = [f"<b>{label}:</b> " + (f"<code>{escape(text)}</code>" if code else escape(text))
                for label, text, code in result_meta(result)]
        parts.append('<p class="meta">' + "<br>".join(meta) + "</p>")
        head = headline_table(result)
        if head:
            parts.append(html_table(head))
        sections, render_errors = command_sections(result)
        parts += [html_section(s) for s in sections]
        parts.append("<h3>Findings</h3>")
        ranked = result.ranked()
        if not ranked:
            parts.append("<p>No findings.</p>")
        for finding in ranked:
            sev = finding.severity.value
            where = f" at <code>{escape(str(finding.location))}</code>" if finding.location else ""
            block = [
                f'<div class="finding"><span class="sev sev-{sev}">{sev}</span> '
                f"<b>{escape(finding.code)} {escape(finding.name)}</b>: {inline(finding.title)}{where}"
            ]
            block += [f"<div><i>{label}:</i> {inline(text)}</div>" for label, text in finding_details(finding)]
            block.append("</div>")
            parts.append("".join(block))
        errors = list(result.errors) + render_errors
        if errors:
            items = "".join(
                f"<li><b>{escape(e.source)}</b>: {escape(e.message)}"
                + (f" (×{e.count})" if e.count > 1 else "")
                + "</li>"
                for e in errors
            )
            parts.append(f'<div class="errors"><b>Partial result:</b><ul>{items}</ul></div>')
        return "".join(parts)


RENDERER_CLASS = HtmlRenderer
