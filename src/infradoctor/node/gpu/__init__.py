"""GPU probing behind one interface (:class:`GpuBackend`): NVML, nvidia-smi's reports, or none.

:func:`select_backend` picks NVML when the library initialises, else nvidia-smi's XML when the binary exists, else
the none backend with a note: a machine without GPUs is a normal case, not an error.
"""

from __future__ import annotations

from pathlib import Path

from infradoctor.node.evidence import Note
from infradoctor.node.gpu.base import GpuBackend, GpuProbe
from infradoctor.node.gpu.none import NoGpuBackend
from infradoctor.node.gpu.nvml import NvmlBackend, replay_backend
from infradoctor.node.gpu.smi_xml import SmiXmlBackend, find_nvidia_smi

BACKEND_CHOICES = ("auto", "nvml", "smi", "none")
"""Values of ``--gpu-backend``."""

__all__ = ["BACKEND_CHOICES", "GpuBackend", "GpuProbe", "select_backend"]


def select_backend(
    choice: str = "auto",
    *,
    smi_xml: str | Path | None = None,
    nvml_record: str | Path | None = None,
) -> tuple[GpuBackend, tuple[Note, ...]]:
    """The backend to use and notes about the choice.

    ``smi_xml`` (a saved ``nvidia-smi -q -x`` or ``nvidia-smi -q`` report) and ``nvml_record`` (recorded NVML
    values) evaluate recorded evidence instead of this machine's GPUs. ``auto`` tries NVML, then nvidia-smi, then none.
    """
    if nvml_record is not None:
        try:
            return replay_backend(nvml_record), ()
        except (OSError, ValueError) as exc:
            return NoGpuBackend(f"cannot use NVML record {nvml_record}: {exc}"), ()
    if smi_xml is not None:
        return SmiXmlBackend(report_file=smi_xml), ()
    if choice == "none":
        return NoGpuBackend("GPU probing switched off (--gpu-backend none)"), ()
    if choice == "smi":
        return SmiXmlBackend(), ()
    nvml = NvmlBackend()
    failure = nvml.init()
    if failure is None:
        return nvml, ()
    if choice == "nvml":
        return NoGpuBackend(failure), ()
    notes = (Note("gpu.nvml", failure),)
    binary = find_nvidia_smi()
    if binary is not None:
        return SmiXmlBackend(binary=binary), (*notes, Note("gpu", "falling back to nvidia-smi -q -x"))
    return NoGpuBackend(f"{failure}; nvidia-smi not found on PATH"), ()
