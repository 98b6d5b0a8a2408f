"""The bundled scenarios: a sick workload, its fixed version, and how to measure both.

Each scenario is measured twice with the same command (baseline on the sick workload, after on the fixed one),
stored with labels ``<name>-baseline`` / ``<name>-after`` and a note that says what changed, so that
``infradoctor report`` pairs them and states ``metric before -> metric after``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path


@dataclass(frozen=True)
class Scenario:
    """One sick workload and its fix."""

    name: str
    """Short name used in labels, e.g. ``batch``."""
    title: str
    """What the workload is, in the user's words."""
    sick: str
    """File name of the sick workload in the bundled ``workloads`` folder."""
    fixed: str
    """File name of the fixed workload."""
    fix_note: str
    """What the fix changed (stored as the after run's note)."""
    args: tuple[str, ...] = ()
    """Arguments for the workload script."""
    service: bool = False
    """True when the workload is an HTTP service measured under load."""
    expected: tuple[str, ...] = field(default_factory=tuple)
    """Codes the baseline should show (the demo says so when one is missing)."""


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="serve",
        title="an inference service that loads its model per request and blocks its event loop",
        sick="serve_sick.py",
        fixed="serve_fixed.py",
        fix_note="Load the model once at start-up (FastAPI lifespan) and run inference in a plain `def` endpoint "
        "(thread pool) under torch.inference_mode(), so the event loop stays free.",
        service=True,
        expected=("P006", "S001"),
    ),
    Scenario(
        name="batch",
        title="a batch-inference job that scores one record at a time with autograd on",
        sick="batch_sick.py",
        fixed="batch_fixed.py",
        fix_note="Score in batches of 256 under model.eval() and torch.inference_mode().",
        args=("3000",),
        expected=("P002", "P003"),
    ),
    Scenario(
        name="train",
        title="a training loop starved by its data loading",
        sick="train_sick.py",
        fixed="train_fixed.py",
        fix_note="DataLoader(num_workers=8, persistent_workers=True, prefetch_factor=4) so decoding overlaps compute.",
        args=("40",),
        expected=("P001",),
    ),
)

SERVICE_BODY = {"inputs": [[0.01 * ((i * 7 + j) % 100) for j in range(256)] for i in range(4)]}


def copy_workloads(dest: Path) -> Path:
    """Copy the bundled workloads into ``dest/workloads`` (so findings point at files the user can open)."""
    target = dest / "workloads"
    target.mkdir(parents=True, exist_ok=True)
    source = resources.files("infradoctor.demo") / "workloads"
    for entry in source.iterdir():
        if entry.name.endswith(".py") and entry.name != "__init__.py":
            with resources.as_file(entry) as path:
                shutil.copyfile(path, target / entry.name)
    (target / "request.json").write_text(json.dumps(SERVICE_BODY), encoding="utf-8")
    return target
