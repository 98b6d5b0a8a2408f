"""Renderers: each takes results and returns text (terminal, JSON, Markdown, self-contained HTML)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infradoctor._lazy import lazy_exports

if TYPE_CHECKING:
    from infradoctor.report.base import FORMATS, Renderer, get_renderer, render

__getattr__ = lazy_exports(__name__, {
    "FORMATS": "base",
    "Renderer": "base",
    "get_renderer": "base",
    "render": "base",
})

__all__ = ["FORMATS", "Renderer", "get_renderer", "render"]
