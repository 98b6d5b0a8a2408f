"""Terminal: Rich tables and panels; findings ranked by severity with evidence numbers and the fix."""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table as RichTable
from rich.text import Text

from infradoctor.bounded import printable_deep
from infradoctor.report.base import Renderer
from infradoctor.report.sections import (
    Bar,
    Section,
    Table,
    command_sections,
    finding_details,
    format_value,
    headline_table,
)
from infradoctor.result import Result, describe_target

SEVERITY_STYLE = {
    "critical": "bold white on red",
    "high": "bold red",
    "medium": "yellow",
    "low": "cyan",
    "info": "dim",
}
BAR_COLORS = ("blue", "dark_orange", "green", "magenta", "red", "cyan", "grey50", "yellow")


def rich_table(table: Table) -> RichTable:
    """A Rich table; numbers right-aligned."""
    out = RichTable(title=escape(table.title) if table.title else None, show_edge=False, header_style="bold")
    numeric = [
        all(isinstance(row[i], (int, float)) or row[i] is None for row in table.rows) if table.rows else False
        for i in range(len(table.columns))
    ]
    for i, col in enumerate(table.columns):
        out.add_column(escape(str(col)), justify="right" if numeric[i] else "left")
    for row in table.rows:
        out.add_row(*(Text(format_value(c)) for c in row))
    return out


def rich_bar(bar: Bar, width: int = 60) -> Text:
    """A stacked bar of block characters with a legend."""
    total = sum(max(v, 0.0) for _, v in bar.parts) or 1.0
    text = Text()
    if bar.title:
        text.append(bar.title + "\n", style="bold")
    for i, (_, value) in enumerate(bar.parts):
        cells = round(width * max(value, 0.0) / total)
        text.append("█" * cells, style=BAR_COLORS[i % len(BAR_COLORS)])
    text.append("\n")
    for i, (label, value) in enumerate(bar.parts):
        text.append("■ ", style=BAR_COLORS[i % len(BAR_COLORS)])
        text.append(f"{label} {100 * max(value, 0.0) / total:.0f}% ({format_value(value)}{bar.unit})  ")
    return text


def rich_section(section: Section) -> RenderableType:
    """A section as a group under a heading."""
    items: list[RenderableType] = [Text(section.title, style="bold underline")]
    items += [rich_bar(b) for b in section.bars]
    items += [rich_table(t) for t in section.tables]
    items += [Text(line) for line in section.lines]
    return Group(*items)


class TerminalRenderer(Renderer):
    """Human summary for a terminal; ``color`` and ``width`` are fixed for reproducible output in tests."""

    format = "terminal"

    def __init__(self, color: bool = False, width: int = 110) -> None:
        self.color = color
        self.width = width

    def render(self, results: Sequence[Result]) -> str:
        """Rendered text (with ANSI codes when ``color``)."""
        buffer = io.StringIO()
        console = Console(
            file=buffer,
            force_terminal=self.color,
            no_color=not self.color,
            width=self.width,
            highlight=False,
            emoji=False,
        )
        for result in results:
            for renderable in self.renderables(Result.from_dict(printable_deep(result.to_dict()))):
                console.print(renderable)
        return buffer.getvalue()

    def renderables(self, result: Result) -> list[RenderableType]:
        """What to print for one result, in order."""
        label = f" [{result.label}]" if result.label else ""
        head = Text()
        head.append(f"infradoctor {result.command}{label}", style="bold")
        head.append(f"  {describe_target(result.target)}", style="dim")
        head.append(f"\n{result.started_at}  {result.duration_s:.1f} s")
        if result.run_id:
            head.append(f"  run {result.run_id}", style="dim")
        out: list[RenderableType] = [head]
        headline = headline_table(result)
        if headline:
            out.append(rich_table(headline))
        sections, render_errors = command_sections(result)
        out += [rich_section(s) for s in sections]
        ranked = result.ranked()
        if not ranked:
            out.append(Text("No findings.", style="green"))
        for finding in ranked:
            sev = finding.severity.value
            body = Text()
            body.append(f"{sev.upper():8}", style=SEVERITY_STYLE[sev])
            body.append(f" {finding.code} {finding.name}", style="bold")
            body.append(f": {finding.title}")
            if finding.location:
                body.append(f"\n  at {finding.location}", style="cyan")
            for label, detail in finding_details(finding):
                body.append(f"\n  {label.lower()}: {detail}", style="" if label == "Fix" else "dim")
            out.append(body)
        errors = list(result.errors) + render_errors
        if errors:
            text = Text()
            for e in errors:
                suffix = f" (x{e.count})" if e.count > 1 else ""
                text.append(f"{e.source}: {e.message}{suffix}\n")
            out.append(Panel(text, title="partial result", border_style="yellow"))
        return out


RENDERER_CLASS = TerminalRenderer
