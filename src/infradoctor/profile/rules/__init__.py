"""Profile rules P001-P015 and N011: one module per code, each declaring ``RULE`` and its checks.

The checks read a :class:`~infradoctor.profile.analyze.ProfileAnalysis`; :func:`infradoctor.findings.run_rules`
runs them.
"""

from __future__ import annotations

from infradoctor.profile.rules._common import RuleOptions

__all__ = ["RuleOptions"]
