"""Facts about the machine and libraries a run was made on, for the report's Method section."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Any

from infradoctor import __version__

_LIBRARIES = ("torch", "nvidia-ml-py", "psutil", "fastapi", "uvicorn", "aiohttp", "numpy", "transformers", "vllm")


def library_versions(names: tuple[str, ...] = _LIBRARIES) -> dict[str, str]:
    """Installed versions of the libraries that matter for AI workloads (without importing them)."""
    found: dict[str, str] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def describe_environment() -> dict[str, Any]:
    """Host name, OS, CPU, memory, Python and library versions; cheap (no GPU or torch import)."""
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "infradoctor": __version__,
        "cpu_count": os.cpu_count(),
        "libraries": library_versions(),
    }
    processor = _cpu_model()
    if processor:
        info["cpu_model"] = processor
    try:
        import psutil

        info["memory_total_bytes"] = int(psutil.virtual_memory().total)
    except Exception:  # noqa: BLE001 - environment facts are best effort
        pass
    return info


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return platform.processor() or None
    return platform.processor() or None
