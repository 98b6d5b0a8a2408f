"""Helpers shared by the profile rules."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infradoctor.findings import Location
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.evidence import CallSite, ModuleUse, StepRecord


@dataclass(frozen=True)
class RuleOptions:
    """Knobs shared by the rules."""

    min_steps: int = 5
    """Rules that judge step shares need at least this many steady steps."""
    cwd: str | None = None
    """Paths under this folder are shown relative to it."""
    serving: bool = False
    """The workload is a server under load (``profile --load-url``): no training steps; a step is the time from
    one top-level model call to the next, which includes the idle time between requests."""
    requests: int | None = None
    """Requests the load sent to the server (serving only; None when unknown)."""


def work_units(analysis: ProfileAnalysis, options: RuleOptions) -> tuple[int, str]:
    """What per-unit counts divide by, and its name.

    Steps; for a server the larger of top-level model calls and requests (a read per request is normal there,
    not a per-step loop).
    """
    steps = len(analysis.evidence.steps)
    if not options.serving:
        return max(1, steps), "step"
    main = analysis.main
    forwards = main.calls if main is not None else 0
    return max(1, steps, forwards, options.requests or 0), "request"


def show_path(path: str, options: RuleOptions) -> str:
    """A path as the user would open it: relative to the working folder when under it."""
    base = options.cwd or os.getcwd()
    try:
        rel = os.path.relpath(path, base)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def location(file: str | None, line: int | None, options: RuleOptions, function: str | None = None) -> Location | None:
    """A finding location, or None without a file."""
    if not file:
        return None
    return Location(show_path(file, options), line or None, function=function)


def sites_of(module: ModuleUse) -> tuple[CallSite, ...]:
    """The module's call sites; evidence recorded before call sites were kept becomes one site for the module."""
    if module.call_sites:
        return module.call_sites
    first = module_site(module) or {}
    return (CallSite(
        file=str(first.get("file") or ""), line=int(first.get("line") or 0), calls=module.calls,
        time_s=module.time_s, grad_calls=module.grad_calls, unused_grad_calls=module.unused_grad_calls,
        train_mode_calls=module.train_mode_calls,
        train_mode_inference_calls=module.train_mode_inference_calls
        + min(module.unused_grad_calls, module.train_mode_calls - module.train_mode_inference_calls),
        batch_sizes=dict(module.batch_sizes), retained_sampled=module.retained_sampled,
        retained_alive=module.retained_alive,
    ),)


def site_location(site: CallSite, options: RuleOptions) -> Location | None:
    """Where a call site is, as the user opens it."""
    return location(site.file, site.line, options, site.function or None)


def module_site(module: ModuleUse) -> Mapping[str, Any] | None:
    """The module's most frequent recorded call site."""
    return max(module.sites, key=lambda s: int(s.get("calls", 0)), default=None)


def module_location(module: ModuleUse, options: RuleOptions) -> Location | None:
    """Where the module is called."""
    site = module_site(module)
    return location(site.get("file"), site.get("line"), options) if site else None


def where(loc: Location | None) -> str:
    """``at file:line`` text for fix messages ('' without a location)."""
    return f"at {loc}" if loc else ""


def pct(fraction: float) -> str:
    """A fraction as a whole percent."""
    return f"{100.0 * fraction:.0f}%"


def share(value_s: float, total_s: float) -> float:
    """Value / total clamped to 0-1, rounded."""
    return round(min(1.0, max(0.0, value_s / total_s)), 4) if total_s > 0 else 0.0


def suggested_workers(cores: int) -> int:
    """DataLoader workers to suggest on this machine: one core stays with the training loop, at most 8."""
    return max(1, min(8, (cores or 4) - 1))


PARTS = 5
"""Parts a run's steady steps are cut into when a timing finding must hold across the run."""


def held_in_parts(steps: Sequence[StepRecord], phase: Callable[[StepRecord], float], threshold: float,
                  parts: int = PARTS) -> tuple[int, int]:
    """In how many of ``parts`` consecutive parts of ``steps`` the phase's share of step time reaches ``threshold``.

    A timing finding should hold across the run's own repeated measurements, not only on the whole.
    """
    n = min(parts, len(steps))
    held = 0
    for i in range(n):
        chunk = steps[i * len(steps) // n:(i + 1) * len(steps) // n]
        total = sum(s.duration_s for s in chunk)
        if total > 0 and sum(phase(s) for s in chunk) / total >= threshold:
            held += 1
    return held, n
