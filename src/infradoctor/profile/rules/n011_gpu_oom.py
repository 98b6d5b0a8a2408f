"""N011 gpu-oom, from the exception that ended a profiled workload.

What it detects:
    A workload that died with ``torch.cuda.OutOfMemoryError`` (``torch.OutOfMemoryError``) or any exception whose
    message says "CUDA out of memory" / "CUDA error: out of memory", and the user line that raised it.

Why it matters:
    The run failed outright: no step after the crash happened, and a larger batch or a longer sequence on the same
    GPU fails the same way again.

How it is measured:
    The profiler's runner catches the exception that ends the program and records its class, message and the
    innermost frame of the user's own code (frames of torch, the standard library and installed packages are
    passed over). Fires when the class name is one of ``OOM_CLASSES`` or the message matches ``OOM_MESSAGES``.

Fix:
    Lower the batch size or maximum sequence length, use reduced precision or activation checkpointing, free
    tensors kept across steps (see P007 for memory growth), or stop other processes on the GPU.
"""

from __future__ import annotations

from infradoctor.findings import Finding, make_finding
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, location

CODE = "N011"
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
        make_finding(
            CODE,
            f"The workload crashed with {exception.get('type')}" + (f" at {loc}" if loc else "")
            + (f": {first[:200]}" if first else ""),
            evidence,
            location=loc,
        )
    ]
