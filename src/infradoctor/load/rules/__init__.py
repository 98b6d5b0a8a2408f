"""The load rules, one module each; :func:`evaluate` runs them all over one :class:`LoadEvidence`.

Every rule reads only points where the load generator was not saturated (``LoadEvidence.valid_points``), except
S009 which reports the saturated ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from infradoctor.findings import Finding
from infradoctor.load.evidence import LoadEvidence
from infradoctor.load.rules import (
    s001_serialized_requests,
    s003_no_backpressure,
    s005_cold_start_latency,
    s006_error_rate,
    s007_client_timeout_too_low,
    s008_knee,
    s009_load_generator_saturated,
)

Rule = Callable[[LoadEvidence, Mapping[str, Any] | None], list[Finding]]

RULES: tuple[Rule, ...] = (
    s001_serialized_requests.check,
    s003_no_backpressure.check,
    s005_cold_start_latency.check,
    s006_error_rate.check,
    s007_client_timeout_too_low.check,
    s008_knee.check,
    s009_load_generator_saturated.check,
)


def evaluate(evidence: LoadEvidence, options: Mapping[str, Any] | None = None) -> list[Finding]:
    """All findings of all load rules."""
    findings: list[Finding] = []
    for rule in RULES:
        findings.extend(rule(evidence, options))
    return findings
