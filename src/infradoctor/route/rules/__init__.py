"""Route rules: one module per finding code, each a pure function ``check(evidence, options) -> list[Finding]``."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from infradoctor.findings import Finding, rank_findings
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions

__all__ = ["RuleOptions", "rule_modules", "run_rules"]


def rule_modules() -> list[ModuleType]:
    """Every rule module of this package, in code order."""
    return [
        importlib.import_module(f"{__name__}.{info.name}")
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name)
        if not info.name.startswith("_")
    ]


def run_rules(evidence: RouteEvidence, options: RuleOptions | None = None) -> list[Finding]:
    """All findings the evidence supports, most important first."""
    opts = options or RuleOptions()
    findings: list[Finding] = []
    for module in rule_modules():
        findings.extend(module.check(evidence, opts))
    return rank_findings(findings)
