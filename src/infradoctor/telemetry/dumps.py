"""Saved router statistics dumps, judged by the router rules: ``infradoctor logs --router-stats-dump FILE``.

Each file is what a router's statistics endpoint answered, saved (``curl .../stats?format=json > envoy.json``,
HAProxy's ``;csv`` page or ``show stat``, ``show servers state``, ``/stats/prometheus``, nginx ``stub_status``):
read through :func:`~infradoctor.telemetry.router.parse_router_stats`, the kind detected from the content, and
judged as a window from the router's start to the dump (:func:`~infradoctor.telemetry.evidence.dump_evidence`).
A dump that lists only hosts (Envoy ``/clusters``, HAProxy ``show servers state``) is folded into the dump of the
same router kind given just before it, so ``--router-stats-dump stats.json --router-stats-dump clusters.json``
names the hosts whose counters the first one summed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from infradoctor.findings import Finding, Location, run_rules
from infradoctor.telemetry.evidence import dump_evidence
from infradoctor.telemetry.router import MAX_BODY_BYTES, RouterSnapshot, parse_router_stats


@dataclass
class DumpsRead:
    """What :func:`read_dumps` found."""

    findings: list[Finding] = field(default_factory=list)
    """The router rules' findings, each located at its dump file."""
    kinds: dict[str, str | None] = field(default_factory=dict)
    """Per file as given, the router kind read from it (None: nothing could be read)."""
    notes: list[str] = field(default_factory=list)
    """Files that could not be read, or only partly."""


def _read(path: str) -> tuple[bytes | None, str | None]:
    try:
        with Path(path).open("rb") as fh:
            return fh.read(MAX_BODY_BYTES + 1), None
    except OSError as exc:
        return None, f"{path}: cannot be read ({exc.strerror or type(exc).__name__})"


def read_dumps(paths: Sequence[str]) -> DumpsRead:
    """Every dump parsed, host-only dumps folded into the one before, and the router rules run over each."""
    out = DumpsRead()
    judged: list[tuple[str, RouterSnapshot]] = []
    for path in paths:
        data, problem = _read(path)
        if data is None:
            out.kinds[path] = None
            out.notes.append(problem or f"{path}: cannot be read")
            continue
        snap = parse_router_stats(data, path)
        if snap.kind == "unknown" or (snap.kind == "prometheus" and not snap.values):
            out.kinds[path] = None
            out.notes.append(f"{path}: not router statistics ({snap.problem or 'nothing known in it'})")
            continue
        out.kinds[path] = snap.kind
        if snap.problem:
            out.notes.append(f"{path}: read in part ({snap.problem})")
        if not snap.values and snap.hosts and judged and judged[-1][1].kind == snap.kind:
            name, before = judged[-1]
            judged[-1] = (f"{name} + {path}", before.merged(snap))
        else:
            judged.append((path, snap))
    for name, snap in judged:
        out.findings += [replace(f, location=f.location or Location(file=name)) for f in run_rules(dump_evidence(snap))]
    return out
