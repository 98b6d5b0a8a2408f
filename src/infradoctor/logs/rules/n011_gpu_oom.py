"""N011 gpu-oom, from application logs and tracebacks.

What it detects:
    "CUDA out of memory", ``torch.OutOfMemoryError`` / ``torch.cuda.OutOfMemoryError``, "CUDA error: out of memory".

Why it matters:
    The request or training step failed outright; a server that survives the exception may keep failing every
    large request, and fragmentation makes it worse over time.

How it is measured:
    Signature catalog matches (in plain lines, tracebacks and JSON log fields) merged into incidents per exception
    type or source and time window.

Fix:
    Lower the batch size or maximum sequence length, use reduced precision or activation checkpointing, stop other
    processes on the GPU; if memory grows over time, look for tensors kept across steps (P007).
"""

from __future__ import annotations

from infradoctor.findings import Finding
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.rules import RuleOptions
from infradoctor.logs.rules._signature import signature_findings

CODE = "N011"


def check(evidence: LogsEvidence, options: RuleOptions) -> list[Finding]:
    """One finding with every GPU out-of-memory incident."""
    return signature_findings(evidence, CODE, ("gpu_oom",), "CUDA out of memory")
