"""The logs rules: one module per rule, each a pure function ``check(evidence, options) -> list[Finding]``.

Codes R001-R012 and N001/N009/N011 are shared with other commands (``route``, ``node``, ``profile``); the module
names say what each rule reads from logs.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

from infradoctor.findings import Finding
from infradoctor.logs.evidence import LogsEvidence


@dataclass(frozen=True)
class RuleOptions:
    """Options every logs rule receives."""

    min_requests: int = 20
    """Request-based rules stay quiet below this many requests (too few to judge)."""


Rule = Callable[[LogsEvidence, RuleOptions], list[Finding]]


def all_rules() -> list[Rule]:
    """``check`` of every rule module in this package, in module order."""
    rules: list[Rule] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        rules.append(module.check)
    return rules


def run_rules(evidence: LogsEvidence, options: RuleOptions | None = None) -> list[Finding]:
    """Every rule's findings."""
    opts = options or RuleOptions()
    findings: list[Finding] = []
    for rule in all_rules():
        findings.extend(rule(evidence, opts))
    return findings
