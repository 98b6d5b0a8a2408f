"""The GPU backend interface and what every backend shares: clock event (throttle) reason bits.

A backend turns a driver interface (NVML, ``nvidia-smi -q -x``, or nothing) into a :class:`GpuSnapshot`. "Not
available" is a value: a backend never raises for a missing driver or an unsupported query; it returns
``available=False`` or ``None`` fields and reports why through :attr:`GpuProbe.notes`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from infradoctor.node.evidence import GpuDevice, GpuSnapshot, Note


@dataclass(frozen=True)
class ClockEventReason:
    """One bit of NVML's clock event (formerly "throttle") reasons."""

    bit: int
    """Bit value, e.g. ``0x40``."""
    name: str
    """Short name used in findings, e.g. ``hw_thermal_slowdown``."""
    meaning: str
    """What it means for the workload."""
    benign: bool
    """True for reasons that do not indicate a problem (idle, application clocks, display, sync boost)."""


CLOCK_EVENT_REASONS: tuple[ClockEventReason, ...] = (
    ClockEventReason(0x1, "gpu_idle", "nothing is running, clocks drop to save power", True),
    ClockEventReason(0x2, "applications_clocks_setting", "clocks are limited by the application clocks setting", True),
    ClockEventReason(0x4, "sw_power_cap", "the power draw reached the power limit; the driver lowers clocks", False),
    ClockEventReason(0x8, "hw_slowdown", "hardware slowdown (thermal or power brake) halves clocks or worse", False),
    ClockEventReason(0x10, "sync_boost", "clocks are synchronised with other GPUs in a sync-boost group", True),
    ClockEventReason(0x20, "sw_thermal_slowdown", "the GPU or memory is above its maximum operating temperature",
                     False),
    ClockEventReason(0x40, "hw_thermal_slowdown", "the board is too hot: hardware cuts clocks hard", False),
    ClockEventReason(0x80, "hw_power_brake_slowdown", "an external power brake (PSU or chassis) is asserted", False),
    ClockEventReason(0x100, "display_clocks_setting", "clocks are limited by the display clock setting", True),
)
"""NVML ``nvmlClocksEventReason*`` bits (the same bits as the older ``nvmlClocksThrottleReason*``)."""

REASON_BY_NAME: Mapping[str, ClockEventReason] = MappingProxyType({r.name: r for r in CLOCK_EVENT_REASONS})
"""Reasons by short name; nvidia-smi XML names are ``clocks_event_reason_<name>`` (older: ``clocks_throttle_...``)."""

BENIGN_REASON_MASK = sum(r.bit for r in CLOCK_EVENT_REASONS if r.benign)
"""Bits that never count as throttling: idle, application clocks, sync boost, display clocks."""


def active_reasons(mask: int | None) -> tuple[ClockEventReason, ...]:
    """The reasons whose bits are set in ``mask`` (empty for None)."""
    if not mask:
        return ()
    return tuple(r for r in CLOCK_EVENT_REASONS if mask & r.bit)


@dataclass(frozen=True)
class GpuProbe:
    """A backend's answer: the snapshot and the notes about what it could not read."""

    snapshot: GpuSnapshot
    """GPUs seen."""
    notes: tuple[Note, ...] = ()
    """What was not available, and why."""


class GpuBackend(abc.ABC):
    """One way of reading GPU state."""

    name: str = ""
    """``nvml``, ``smi`` or ``none``."""

    @abc.abstractmethod
    def probe(self) -> GpuProbe:
        """Read every GPU once; never raises for a missing driver or an unsupported query."""

    def sample(self) -> tuple[GpuDevice, ...]:
        """The GPUs' fast-changing values for ``--watch`` (utilisation, memory, temperature, power, clocks).

        The default takes a full probe; backends with cheaper reads override it.
        """
        return self.probe().snapshot.devices

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release the driver connection, if any."""


def unavailable_snapshot(backend: str, source: str) -> GpuSnapshot:
    """A snapshot that says no GPU could be read, and why (``source``)."""
    return GpuSnapshot(
        backend=backend, source=source, driver_version=None, cuda_version=None, devices=(), available=False
    )
