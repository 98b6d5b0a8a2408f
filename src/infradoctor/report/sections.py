"""Command-specific tables, built from a result's metrics, that every renderer shows the same way.

Each command has a presenter ``infradoctor.report.present.<command>`` with ``sections(result) -> list[Section]``; the
renderers call it and lay the sections out in their own format. Computation stays out of renderers.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infradoctor.findings import Finding
from infradoctor.result import ErrorNote, Result, describe_target

Cell = str | int | float | None


@dataclass(frozen=True)
class Table:
    """A table of plain values; renderers format numbers."""

    columns: Sequence[str]
    """Column headers."""
    rows: Sequence[Sequence[Cell]]
    """Rows of cells, one per column."""
    title: str = ""
    """Optional caption."""


@dataclass(frozen=True)
class Bar:
    """A stacked share bar, e.g. the step-time breakdown."""

    parts: Sequence[tuple[str, float]]
    """(label, value) pairs; shares are value / total."""
    title: str = ""
    """Caption."""
    unit: str = ""
    """Unit of the values, e.g. ``ms``."""


@dataclass(frozen=True)
class Section:
    """A titled block of tables, bars and lines of text."""

    title: str
    """Heading."""
    tables: Sequence[Table] = field(default_factory=tuple)
    """Tables."""
    bars: Sequence[Bar] = field(default_factory=tuple)
    """Share bars."""
    lines: Sequence[str] = field(default_factory=tuple)
    """Free text lines (untrusted: renderers escape)."""


SectionBuilder = Callable[[Result], list[Section]]


def command_sections(result: Result) -> tuple[list[Section], list[ErrorNote]]:
    """Sections from the command's ``present`` module; a failing builder becomes an error note, not a crash."""
    try:
        module = importlib.import_module(f"infradoctor.report.present.{result.command}")
    except ModuleNotFoundError:
        return [], []
    builder: SectionBuilder | None = getattr(module, "sections", None)
    if builder is None:
        return [], []
    try:
        return list(builder(result)), []
    except Exception as exc:  # noqa: BLE001 - a renderer must show the rest of the result
        return [], [ErrorNote(f"render:{result.command}", f"{type(exc).__name__}: {exc}")]


def headline_table(result: Result) -> Table | None:
    """The run's headline metrics as a two-column table."""
    headline = result.metrics.get("headline") if isinstance(result.metrics, Mapping) else None
    if not isinstance(headline, Mapping) or not headline:
        return None
    return Table(columns=("metric", "value"), rows=[(str(k), _cell(v)) for k, v in headline.items()])


def _cell(value: Any) -> Cell:
    if value is None or isinstance(value, (str, int, float)):
        return value
    return str(value)


def format_value(value: Cell, *, signed: bool = False) -> str:
    """Numbers for people: sensible precision, thousands separators, never scientific notation; None as a dash.

    ``signed`` puts a ``+`` before positive numbers (changes, interval ends).
    """
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    sign = "+" if signed and isinstance(value, (int, float)) and value > 0 else ""
    if isinstance(value, int):
        return sign + (f"{value:,}" if abs(value) >= 10000 else str(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        magnitude = abs(value)
        if magnitude == 0:
            return "0"
        if magnitude >= 1000:
            return sign + f"{value:,.0f}"
        if magnitude >= 10:
            return sign + f"{value:.1f}"
        if magnitude >= 0.01:
            return sign + f"{value:.3g}"
        if magnitude < 1e-9:
            return "0"
        decimals = min(12, 1 - math.floor(math.log10(magnitude)))  # two significant digits
        return sign + f"{value:.{decimals}f}"
    return str(value)


P_VALUE_FLOOR = 0.001
"""p-values below this are shown as ``p<0.001``: smaller ones say nothing more, and rounded they read ``p=0``."""


def format_p_value(value: Cell) -> str:
    """A p-value for people: ``p=0.012``, ``p<0.001`` (never ``p=0`` or ``1e-12``), ``p=–`` when there is none."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "p=–"
    if value < P_VALUE_FLOOR:
        return f"p<{P_VALUE_FLOOR:g}"
    return f"p={float(value):.2g}"  # two significant digits; from 0.001 up, never an exponent


def _is_p_value(key: str) -> bool:
    return key == "p_value" or key.endswith("_p_value")


def format_evidence(evidence: Mapping[str, Any], limit: int = 8) -> str:
    """``key=value`` pairs of a finding's evidence: plain numbers and words first, nested values only to fill up."""
    scalar = [(k, v) for k, v in evidence.items() if not isinstance(v, (Mapping, list, tuple))]
    nested = [(k, v) for k, v in evidence.items() if isinstance(v, (Mapping, list, tuple))]
    parts: list[str] = []
    for key, value in [*scalar, *nested][:limit]:
        if _is_p_value(key) and not isinstance(value, (Mapping, list, tuple)):
            parts.append(f"{key}{format_p_value(_cell(value))[1:]}")  # p_value<0.001, p_value=0.04
            continue
        text = _short_json(value) if isinstance(value, (Mapping, list, tuple)) else format_value(_cell(value))
        parts.append(f"{key}={text}")
    return ", ".join(parts)


def finding_details(finding: Finding) -> list[tuple[str, str]]:
    """A finding's detail lines as (label, plain text), in the order every renderer shows them.

    The evidence numbers, the fix, the risk of applying it; renderers escape and style the text their own way.
    """
    details: list[tuple[str, str]] = []
    if finding.evidence:
        details.append(("Evidence", format_evidence(finding.evidence)))
    if finding.fix:
        details.append(("Fix", finding.fix))
    if stated_risk(finding.risk):
        details.append(("Risk", finding.risk))
    return details


def result_meta(result: Result) -> list[tuple[str, str, bool]]:
    """The lines every renderer shows under a result's heading: (label, text, shown as code)."""
    meta = [("Target", describe_target(result.target), True),
            ("Started", f"{result.started_at}, {result.duration_s:.1f} s", False)]
    if result.run_id:
        meta.append(("Run", result.run_id, True))
    if result.note:
        meta.append(("Note", result.note, False))
    return meta


def stated_risk(risk: str | None) -> bool:
    """True when a risk text says something (not empty, not a bare "None.")."""
    return bool(risk) and str(risk).strip().rstrip(".").lower() not in ("none", "n/a", "")


def _short_json(value: Any, limit: int = 80) -> str:
    import json

    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"
