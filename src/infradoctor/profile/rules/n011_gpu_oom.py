"""N011 gpu-oom, from the exception that ended a profiled workload.

What it detects:
    A workload that died with ``torch.cuda.OutOfMemoryError`` (``torch.OutOfMemoryError``) or any exception whose
    message says "CUDA out of memory" / "CUDA error: out of memory", and the user line that raised it.

    From logs (`infradoctor logs`): "CUDA out of memory", ``torch.OutOfMemoryError`` /
    ``torch.cuda.OutOfMemoryError``, "CUDA error: out of memory".

Why it matters:
    The run failed outright: no step after the crash happened, and a larger batch or a longer sequence on the same
    GPU fails the same way again.

    From logs (`infradoctor logs`): The request or training step failed outright; a server that survives the
    exception may keep failing every large request, and fragmentation makes it worse over time.

How it is measured:
    The profiler's runner catches the exception that ends the program and records its class, message and the
    innermost frame of the user's own code (frames of torch, the standard library and installed packages are
    passed over). Fires when the class name is one of ``OOM_CLASSES`` or the message matches ``OOM_MESSAGES``.

    From logs (`infradoctor logs`): Signature catalog matches (in plain lines, tracebacks and JSON log fields)
    merged into incidents per exception type or source and time window.

Fix:
    Lower the batch size or maximum sequence length, use reduced precision or activation checkpointing, free
    tensors kept across steps (see P007 for memory growth), or stop other processes on the GPU.

    From logs (`infradoctor logs`): Lower the batch size or maximum sequence length, use reduced precision or
    activation checkpointing, stop other processes on the GPU; if memory grows over time, look for tensors kept
    across steps (P007).
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.incidents import LogsRuleOptions, signature_findings
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, location

RULE = Rule(
    "N011",
    "gpu-oom",
    Severity.HIGH,
    "CUDA out of memory",
    fix="Lower batch size, use reduced precision or activation checkpointing; check for memory growth (P007).",
    risk="Smaller batches lower throughput.",
    commands=("logs", "profile"),
)
OOM_CLASSES = ("OutOfMemoryError",)
"""Exception class names that mean CUDA ran out of memory."""
OOM_MESSAGES = ("cuda out of memory", "cuda error: out of memory")
"""Lower-case message fragments that mean the same."""


def is_cuda_oom(exception: object) -> bool:
    """An exception record (``type``, ``message``) that is a CUDA out-of-memory error."""
    if not isinstance(exception, dict):
        return False
    message = str(exception.get("message") or "").lower()
    return str(exception.get("type")) in OOM_CLASSES or any(m in message for m in OOM_MESSAGES)


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """The workload ended with a CUDA out-of-memory error."""
    exception = analysis.evidence.exception
    if exception is None or not is_cuda_oom(dict(exception)):
        return []
    loc = location(exception.get("file"), exception.get("line"), options, exception.get("function"))
    message = str(exception.get("message") or "").strip().splitlines()
    first = message[0] if message else ""
    evidence: dict[str, object] = {"exception": exception.get("type"), "message": first[:500],
                                   "steps_before_crash": len(analysis.steps)}
    if analysis.evidence.memory.get("cuda_peak"):
        evidence["cuda_peak_mb"] = round(analysis.evidence.memory["cuda_peak"] / 1e6, 1)
    return [
        RULE.finding(
            f"The workload crashed with {exception.get('type')}" + (f" at {loc}" if loc else "")
            + (f": {first[:200]}" if first else ""),
            evidence,
            location=loc,
        )
    ]


@RULE.check(LogsEvidence, LogsRuleOptions)
def check_logs(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """One finding with every GPU out-of-memory incident."""
    return signature_findings(evidence, RULE, ("gpu_oom",), "CUDA out of memory")
