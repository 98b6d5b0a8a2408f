"""Signs that this machine should have a visible GPU: ``CUDA_VISIBLE_DEVICES``, ``/dev/nvidia*``, the driver."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping
from pathlib import Path

from infradoctor.node.evidence import GpuExpectation


def probe_expectation(
    environ: Mapping[str, str] | None = None,
    *,
    dev_glob: str = "/dev/nvidia[0-9]*",
    modules_file: str = "/proc/modules",
    version_file: str = "/proc/driver/nvidia/version",
) -> GpuExpectation:
    """Read the signs; every path is injectable for tests."""
    env = os.environ if environ is None else environ
    nodes = tuple(sorted(glob.glob(dev_glob)))
    loaded = False
    try:
        modules = Path(modules_file).read_text(encoding="utf-8", errors="replace")
        loaded = re.search(r"^nvidia\s", modules, re.M) is not None
    except OSError:
        pass
    version: str | None = None
    try:
        lines = Path(version_file).read_text(encoding="utf-8", errors="replace").splitlines()
        version = lines[0].strip() if lines else None
        loaded = True
    except OSError:
        pass
    return GpuExpectation(
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
        device_nodes=nodes,
        driver_loaded=loaded,
        driver_version_file=version,
    )
