"""The backend for machines without a usable NVIDIA driver: no GPUs, and a note that says why."""

from __future__ import annotations

from infradoctor.node.evidence import Note
from infradoctor.node.gpu.base import GpuBackend, GpuProbe, unavailable_snapshot


class NoGpuBackend(GpuBackend):
    """Reports that no GPU could be read; ``reason`` says why (shown in the result's notes)."""

    name = "none"

    def __init__(self, reason: str = "no GPU backend selected") -> None:
        self.reason = reason

    def probe(self) -> GpuProbe:
        """An unavailable snapshot."""
        return GpuProbe(unavailable_snapshot("none", self.reason), (Note("gpu", self.reason),))
