"""Route's use of the router's and model servers' own statistics (``--router-stats``, ``--server-metrics``).

The router's names for its hosts are mapped to the ``--backend`` URLs by address (``backend_aliases``), the
windows become evidence beside the interleaved measurement (``with_telemetry``), their read problems become
notes, and findings the router's word and the outside view both make (the same code about the same backend)
are merged into one (``merge_findings``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from infradoctor.findings import Finding, rank_findings
from infradoctor.result import ErrorNote
from infradoctor.route.analysis import BackendTarget, address_of
from infradoctor.route.evidence import RouteEvidence
from infradoctor.telemetry.evidence import RouterEvidence, RouterWindow, ServerEvidence, ServerPoint, ServerWindow


def backend_aliases(windows: Sequence[RouterWindow], targets: Sequence[BackendTarget]) -> dict[str, str]:
    """The router's host names (and addresses) -> the ``--backend`` URL at that address."""
    aliases: dict[str, str] = {}
    for window in windows:
        for host in window.hosts:
            if not host.address:
                continue
            address = address_of(host.address)
            url = next((t.url for t in targets if address in t.addresses or address == t.address), None)
            if url is not None:
                aliases.setdefault(host.name, url)
                aliases.setdefault(host.address, url)
    return aliases


def with_telemetry(
    evidence: RouteEvidence,
    routers: Sequence[RouterWindow],
    servers: Sequence[ServerWindow],
    aliases: Mapping[str, str],
) -> RouteEvidence:
    """The evidence with the first router window that read statistics, and each server as a one-point sweep."""
    window = next((w for w in routers if w.kind != "unknown"), None)
    router = None
    if window is not None:
        reached = evidence.router.requests - sum(
            n for cls, n in evidence.router.errors.items() if cls.startswith("connect"))
        router = RouterEvidence(window, client_requests=reached or None, client_errors=dict(evidence.router.errors),
                                backend_names=dict(aliases), added_p50_ms=evidence.attribution.added_p50.value)
    att = evidence.attribution
    points = tuple(
        ServerEvidence(w.source, w.kind, (ServerPoint("run", None, None, evidence.router.ok, att.routed_p50_ms,
                                                      att.routed_p99_ms, None, w),))
        for w in servers if w.kind != "unknown"
    )
    return replace(evidence, router_stats=router, servers=points)


def telemetry_notes(routers: Iterable[RouterWindow], servers: Iterable[ServerWindow]) -> list[ErrorNote]:
    """A note per statistics endpoint that could not be read (or only in part)."""
    notes = []
    windows: list[tuple[str, RouterWindow | ServerWindow]] = [("route.router-stats", r) for r in routers]
    windows += [("route.server-metrics", s) for s in servers]
    for where, w in windows:
        if w.kind == "unknown" or w.failed_reads or w.problems:
            what = "could not be read" if w.kind == "unknown" else f"{w.failed_reads} reads failed"
            notes.append(ErrorNote(where, f"{w.source}: {what}" +
                                   (f" ({'; '.join(w.problems[:3])})" if w.problems else ""),
                                   count=max(1, w.failed_reads)))
    return notes


def unmapped_names_note(evidence: RouteEvidence) -> ErrorNote | None:
    """A note when routed responses name hosts the router knows only by name (no address to map them by)."""
    stats = evidence.router_stats
    if stats is None:
        return None
    nameless = {h.name for h in stats.window.hosts if not h.address}
    unknown = [a for a in evidence.distribution.unknown_addresses if a.rsplit(":", 1)[0] in nameless]
    if not unknown:
        return None
    how = " (HAProxy's stats page lists no addresses: give its runtime API, --router-stats tcp://host:port or " \
        "unix:///path.sock, which answers `show servers state`)" if stats.window.kind == "haproxy" else ""
    return ErrorNote("route.distribution", f"the router names its hosts {', '.join(sorted(nameless)[:6])} but reports "
                     f"no address for them, so responses naming them could not be mapped to a --backend{how}")


def merge_findings(first: Sequence[Finding], second: Sequence[Finding]) -> list[Finding]:
    """Both lists ranked, one finding per (code, backend): the more severe kept, the other's evidence beside it."""
    merged: dict[tuple[str, str], Finding] = {}
    loose: list[Finding] = []
    for finding in [*first, *second]:
        backend = finding.evidence.get("backend")
        if not isinstance(backend, str):
            loose.append(finding)
            continue
        key = (finding.code, backend)
        kept = merged.get(key)
        if kept is None:
            merged[key] = finding
            continue
        better, other = (kept, finding) if kept.severity.rank >= finding.severity.rank else (finding, kept)
        merged[key] = replace(better, evidence={**better.evidence, "also": other.title})
    return rank_findings([*merged.values(), *loose])
