"""Before -> after comparison of stored runs, with bootstrap confidence intervals from stored distributions."""

from __future__ import annotations

from infradoctor.compare.analysis import MetricChange, compare_results, lower_is_better

__all__ = ["MetricChange", "compare_results", "lower_is_better"]
