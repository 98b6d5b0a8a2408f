"""S014 model-server-failure: the model server's engine died, a worker died, or a model failed to load.

What it detects:
    Model-server log lines that mean it cannot serve: vLLM's engine is dead (``AsyncEngineDeadError``,
    ``EngineDeadError``, "EngineCore encountered a fatal error", "Engine iteration timed out" before it dies),
    TorchServe's backend worker died ("Worker died", "backend worker process died"), a model failed to load (Triton
    "failed to load", a model ``UNAVAILABLE`` in its status table, TorchServe "Load model failed", "failed to load
    model").

Why it matters:
    Every request after an engine death fails (500s, or a hang until the client's timeout) until the process
    restarts, and the pod may still look healthy to Kubernetes if its liveness probe does not check the engine. A
    model that failed to load answers nothing; a worker that keeps dying restarts in a loop.

How it is measured:
    The signature catalog's ``model_server_dead``, ``engine_iteration_timeout``, ``worker_died`` and
    ``model_load_failed`` lines (traceback source-code lines are not counted: ``raise AsyncEngineDeadError(`` is
    code), merged into incidents per source and time window. Critical when the engine or a worker died, or the
    server gave up loading its models (:data:`FATAL_SIGNATURES`); high for load failures alone.

Fix:
    Read the first error before the death (often CUDA out of memory, an NCCL failure, an illegal memory access, an
    Xid on the node: ``infradoctor logs`` on the kernel log too); make the liveness probe fail when the engine is
    dead so the pod restarts; for load failures fix the first load error (files, backend or TensorRT engine for this
    GPU, memory) and gate readiness on the model being loaded.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.incidents import LogsRuleOptions, signature_findings

RULE = Rule(
    "S014",
    "model-server-failure",
    Severity.CRITICAL,
    "The model server failed: engine dead, worker died or model not loaded",
    fix="Find the first error before the failure (CUDA OOM, NCCL, Xid); restart on engine death via the liveness "
        "probe; fix the model's load error and gate readiness on it.",
    risk="A liveness probe that checks the engine restarts pods under transient stalls too; give it a margin.",
    commands=("logs",),
)

LOGS_SIGNATURES = ("model_server_dead", "engine_iteration_timeout", "worker_died", "model_load_failed")
"""The log signatures of this code."""
FATAL_SIGNATURES = ("model_server_dead", "engine_iteration_timeout", "worker_died")
"""Signatures that mean the server (or a worker) stopped serving: critical."""
FATAL_LOAD_TEXT = "failed to load all models"
"""A load failure that ends the server (Triton exits): critical too."""


@RULE.check(LogsEvidence, LogsRuleOptions)
def check_logs(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """One finding with every model-server failure; critical when the engine or a worker died."""
    incidents = evidence.incidents_of(*LOGS_SIGNATURES)
    if not incidents:
        return []
    fatal = any(i.signature in FATAL_SIGNATURES for i in incidents) or any(
        FATAL_LOAD_TEXT in example for i in incidents for example in i.examples)
    kinds = [s for s in LOGS_SIGNATURES if evidence.signature_counts.get(s)]
    what = {"model_server_dead": "engine dead", "engine_iteration_timeout": "engine hung",
            "worker_died": "worker died", "model_load_failed": "model failed to load"}
    return signature_findings(evidence, RULE, LOGS_SIGNATURES,
                              "Model server failure (" + ", ".join(what[k] for k in kinds) + ")",
                              severity=Severity.CRITICAL if fatal else Severity.HIGH)
