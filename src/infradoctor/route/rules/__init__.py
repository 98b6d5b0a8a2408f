"""Routing rules R001-R012 and S007: one module per code, each declaring ``RULE`` and its checks.

The checks read the evidence of ``route`` (:class:`~infradoctor.route.evidence.RouteEvidence`) and, where logs show
the same thing, of ``logs`` (:class:`~infradoctor.logs.evidence.LogsEvidence`).
"""

from __future__ import annotations

from infradoctor.route.rules._common import RuleOptions

__all__ = ["RuleOptions"]
