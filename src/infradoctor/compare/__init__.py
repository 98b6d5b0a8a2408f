"""Before -> after comparison of stored runs, with bootstrap confidence intervals from stored distributions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infradoctor._lazy import lazy_exports

if TYPE_CHECKING:
    from infradoctor.compare.analysis import MetricChange, compare_results, lower_is_better

__getattr__ = lazy_exports(__name__, {
    "MetricChange": "analysis",
    "compare_results": "analysis",
    "lower_is_better": "analysis",
})

__all__ = ["MetricChange", "compare_results", "lower_is_better"]
