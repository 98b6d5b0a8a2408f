"""Profile rules P001-P015: one module per code, each a pure function ``check(analysis, options) -> findings``."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from infradoctor.findings import Finding, rank_findings
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions

Check = Callable[[ProfileAnalysis, RuleOptions], list[Finding]]


def rule_checks() -> dict[str, Check]:
    """``code -> check`` for every rule module in this package."""
    checks: dict[str, Check] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        checks[module.CODE] = module.check
    return checks


def run_rules(analysis: ProfileAnalysis, options: RuleOptions | None = None) -> list[Finding]:
    """Every rule over one analysis, ranked."""
    opts = options or RuleOptions()
    findings: list[Finding] = []
    for check in rule_checks().values():
        findings.extend(check(analysis, opts))
    return rank_findings(findings)


__all__ = ["RuleOptions", "rule_checks", "run_rules"]
