"""Sections of a ``profile --load-url`` result's service side, read from its typed metrics.

The load sweep (as ``load`` shows it), the event loop per server process, the worker processes.
"""

from __future__ import annotations

from dataclasses import replace

from infradoctor.profile.metrics import LoopSummary, ProfileMetrics, ProfileService, ServerWorkers
from infradoctor.report.present.load import sections as load_sections
from infradoctor.report.sections import Section, Table, format_value
from infradoctor.result import Result

LOOP_TITLE = "Event loop (after start-up)"


def _site(loop: LoopSummary) -> str | None:
    """The line that held the loop longest over its stalls, else the user line the busy probes found most."""
    blocked: dict[str, float] = {}
    for stall in loop.stalls:
        if stall.site is not None:
            key = f"{stall.site.file}:{stall.site.line} ({stall.site.function})"
            blocked[key] = blocked.get(key, 0.0) + stall.duration_s
    if blocked:
        return max(blocked, key=lambda k: blocked[k])
    return loop.busy_sites[0].site if loop.busy_sites else None


def _share(loop: LoopSummary) -> str | None:
    """Share of busy probes that found user code on the loop (None when the monitor did not probe)."""
    return f"{100 * loop.busy_user_share:.0f}%" if loop.probes else None


def service_sections(result: Result, metrics: ProfileMetrics) -> list[Section]:
    """Load sweep (as ``load`` shows it), event-loop lag per server process, worker processes."""
    service = metrics.service
    if service is None:
        return []
    out: list[Section] = []
    if metrics.load is not None:
        out.extend(load_sections(replace(result, command="load", metrics=metrics.load.to_dict())))
    out.append(loop_section(service))
    workers = workers_section(service.workers)
    if workers is not None:
        out.append(workers)
    return out


def _service_lines(service: ProfileService) -> list[str]:
    answered = (f"the server answered {service.ready_url} after {format_value(service.ready_s)} s"
                if service.ready_s is not None else f"the server never answered {service.ready_url}")
    stopped = service.stop_exit_status
    lines = [f"load URL {service.load_url}; {answered}"
             + (f"; exit status after stop {stopped}" if stopped is not None else "")]
    if service.s001_not_judged:
        lines.append(f"S001 not judged: {service.s001_not_judged}")
    return lines


def loop_section(service: ProfileService) -> Section:
    """How the server was reached and stopped, and its event loop per process after start-up."""
    lines = _service_lines(service)
    loops = service.loop
    if not loops:
        return Section(LOOP_TITLE, lines=[*lines, "no event loop was seen in the server"])
    if any(x.probes for x in loops):
        lines.append("busy: share of probes that found the user's code running on the loop")
    return Section(LOOP_TITLE, tables=[Table(
        ("pid", "lag p50 ms", "lag p99 ms", "lag max ms", "stalls", "blocked s", "busy", "blocked by"),
        [(str(x.pid), x.lag_p50_ms, x.lag_p99_ms, x.lag_max_ms, x.stall_count, x.blocked_s, _share(x), _site(x))
         for x in loops],
    )], lines=lines)


def workers_section(layout: ServerWorkers | None) -> Section | None:
    """The server's worker processes and their memory."""
    if layout is None or not layout.workers:
        return None
    return Section("Worker processes", tables=[Table(
        ("pid", "RSS MB", "private MB", "GPU MB", "command"),
        [(str(w.pid), w.rss_mb, w.private_mb, w.gpu_memory_mb, w.command) for w in layout.workers],
    )], lines=[f"supervisor pid {layout.supervisor_pid}" if layout.supervisor_pid else "single-process server"])
