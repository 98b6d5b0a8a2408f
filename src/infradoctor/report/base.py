"""The renderer interface and the registry of formats."""

from __future__ import annotations

import abc
import importlib
from collections.abc import Sequence

from infradoctor.errors import UsageError
from infradoctor.result import Result


class Renderer(abc.ABC):
    """Turns results into text in one format."""

    format: str = ""
    """Format name used by ``--format``."""

    @abc.abstractmethod
    def render(self, results: Sequence[Result]) -> str:
        """Text for one or more results (one per run)."""


_MODULES = {
    "terminal": "infradoctor.report.terminal",
    "json": "infradoctor.report.json_renderer",
    "md": "infradoctor.report.markdown",
    "markdown": "infradoctor.report.markdown",
    "html": "infradoctor.report.html",
}
FORMATS = ("terminal", "json", "md", "html")


def get_renderer(fmt: str, **options: object) -> Renderer:
    """The renderer for a format name (``terminal``, ``json``, ``md``, ``html``)."""
    module_name = _MODULES.get(fmt)
    if module_name is None:
        raise UsageError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    module = importlib.import_module(module_name)
    renderer: Renderer = module.RENDERER_CLASS(**options)
    return renderer


def render(results: Result | Sequence[Result], fmt: str, **options: object) -> str:
    """Render one result or several in a format."""
    items = [results] if isinstance(results, Result) else list(results)
    return get_renderer(fmt, **options).render(items)
