"""What the node rules share: their options and small formatting helpers (not a rule: the name starts with _)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from infradoctor.findings import Location
from infradoctor.node.evidence import GpuDevice

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class NodeOptions:
    """Options of the node rules."""

    thresholds: Mapping[str, float] = field(default_factory=dict)
    """Overrides of documented thresholds, keyed ``"<CODE>.<CONSTANT>"``, e.g. ``{"N004.USED_FRACTION": 0.9}``."""

    def threshold(self, code: str, name: str, default: float) -> float:
        """The override for ``code.name``, else ``default`` (the rule module's constant)."""
        return float(self.thresholds.get(f"{code}.{name}", default))


def gpu_location(device: GpuDevice) -> Location:
    """Findings about a GPU point at it by index and PCI bus id."""
    return Location(file=device.label)


def gib(value: float | None) -> float | None:
    """Bytes in GiB, rounded to 0.01."""
    return None if value is None else round(value / GIB, 2)


def pct(fraction: float | None) -> float | None:
    """A 0-1 fraction as a percentage rounded to 0.1."""
    return None if fraction is None else round(100.0 * fraction, 1)
