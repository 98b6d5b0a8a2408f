"""Markdown: a readable record of a run, for tickets and pull requests."""

from __future__ import annotations

from collections.abc import Sequence

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


def md_escape(text: str) -> str:
    r"""Untrusted text safe inside Markdown, on one line, and still readable as plain text.

    HTML (``<``), table pipes, emphasis stars and links (``](``) are neutralised; brackets and backtick code
    spans stay as written (``[serve]`` is not a link; `` `def` `` is meant as code). Underscores inside words,
    ``>`` and ``#`` stay: they only act at the start of a line, and every line the renderers write starts with
    their own prefix. Control characters (an escape sequence in a file name or a label) become visible escapes
    (``\x1b``, :func:`~infradoctor.bounded.printable`): Markdown written to a terminal cannot retitle or clear it.
    """
    out = str(text).replace("\\", "\\\\")
    for ch in "|*":
        out = out.replace(ch, "\\" + ch)
    out = printable(out.replace("](", "]\\(").replace("<", "&lt;"))
    return " ".join(out.splitlines())


def md_table(table: Table) -> list[str]:
    """A pipe table."""
    lines: list[str] = []
    if table.title:
        lines += [f"*{md_escape(table.title)}*", ""]
    lines.append("| " + " | ".join(md_escape(c) for c in table.columns) + " |")
    lines.append("|" + "|".join("---" for _ in table.columns) + "|")
    for row in table.rows:
        lines.append("| " + " | ".join(md_escape(format_value(c)) for c in row) + " |")
    lines.append("")
    return lines


def md_bar(bar: Bar) -> list[str]:
    """A share bar as a list of percentages."""
    total = sum(v for _, v in bar.parts) or 1.0
    parts = ", ".join(
        f"{md_escape(label)} {100 * value / total:.0f}% ({format_value(value)}{bar.unit})" for label, value in bar.parts
    )
    title = f"{md_escape(bar.title)}: " if bar.title else ""
    return [f"{title}{parts}", ""]


def md_section(section: Section, level: int = 3) -> list[str]:
    """A section with its heading."""
    lines = ["#" * level + " " + md_escape(section.title), ""]
    for bar in section.bars:
        lines += md_bar(bar)
    for table in section.tables:
        lines += md_table(table)
    lines += [md_escape(line) + "  " for line in section.lines]
    if section.lines:
        lines.append("")
    return lines


class MarkdownRenderer(Renderer):
    """Headline, command sections, findings with evidence and fix, and errors."""

    format = "md"

    def render(self, results: Sequence[Result]) -> str:
        """Markdown text."""
        lines: list[str] = []
        for result in results:
            lines += self._one(result)
        return printable("\n".join(lines).rstrip() + "\n")  # also what was not escaped field by field (codes)

    def _one(self, result: Result) -> list[str]:
        title = f"infradoctor {result.command}"
        if result.label:
            title += f" [{result.label}]"
        lines = [f"## {md_escape(title)}", ""]
        meta = [f"- **{label}:** " + (f"`{md_escape(text)}`" if code and label == "Run" else md_escape(text))
                for label, text, code in result_meta(result)]
        lines += meta + [""]
        head = headline_table(result)
        if head:
            lines += md_table(head)
        sections, render_errors = command_sections(result)
        for section in sections:
            lines += md_section(section)
        lines += ["### Findings", ""]
        ranked = result.ranked()
        if not ranked:
            lines += ["No findings.", ""]
        for i, finding in enumerate(ranked, 1):
            where = f" at `{md_escape(str(finding.location))}`" if finding.location else ""
            lines.append(
                f"{i}. **{finding.code} {md_escape(finding.name)}** ({finding.severity.value}): "
                f"{md_escape(finding.title)}{where}"
            )
            lines += [f"   - {label}: {md_escape(text)}" for label, text in finding_details(finding)]
        lines.append("")
        errors = list(result.errors) + render_errors
        if errors:
            lines += ["### Errors (partial result)", ""]
            lines += [
                f"- {md_escape(e.source)}: {md_escape(e.message)}" + (f" (×{e.count})" if e.count > 1 else "")
                for e in errors
            ]
            lines.append("")
        return lines


RENDERER_CLASS = MarkdownRenderer
