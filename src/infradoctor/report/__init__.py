"""Renderers: each takes results and returns text (terminal, JSON, Markdown, self-contained HTML)."""

from __future__ import annotations

from infradoctor.report.base import FORMATS, Renderer, get_renderer, render

__all__ = ["FORMATS", "Renderer", "get_renderer", "render"]
