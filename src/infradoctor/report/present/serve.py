"""Sections of a ``profile --load-url`` result's service side: the load sweep, the event loop, the workers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from infradoctor.report.present.load import sections as load_sections
from infradoctor.report.sections import Section, Table, format_value
from infradoctor.result import Result


def _site(loop: Mapping[str, Any]) -> str | None:
    blocked: dict[str, float] = {}
    for stall in loop.get("stalls") or ():
        site = stall.get("site")
        if isinstance(site, Mapping):
            key = f"{site.get('file')}:{site.get('line')} ({site.get('function')})"
            blocked[key] = blocked.get(key, 0.0) + float(stall.get("duration_s") or 0.0)
    if blocked:
        return max(blocked, key=lambda k: blocked[k])
    busy = [b for b in loop.get("busy_sites") or () if isinstance(b, Mapping)]
    return str(busy[0].get("site")) if busy else None


def _share(loop: Mapping[str, Any]) -> str | None:
    """Share of busy probes that found user code on the loop (None when the monitor did not probe)."""
    value = loop.get("busy_user_share")
    if not loop.get("probes") or not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    return f"{100 * value:.0f}%"


def service_sections(result: Result) -> list[Section]:
    """Load sweep (as ``load`` shows it), event-loop lag per server process, worker processes."""
    metrics = result.metrics
    service = metrics.get("service")
    if not isinstance(service, Mapping):
        return []
    out: list[Section] = []
    load = metrics.get("load")
    if isinstance(load, Mapping):
        out.extend(load_sections(replace(result, command="load", metrics=load)))
    ready_s = service.get("ready_s")
    answered = (f"the server answered {service.get('ready_url')} after {format_value(ready_s)} s"
                if isinstance(ready_s, (int, float)) else f"the server never answered {service.get('ready_url')}")
    stopped = service.get("stop_exit_status")
    lines = [f"load URL {service.get('load_url')}; {answered}"
             + (f"; exit status after stop {stopped}" if stopped is not None else "")]
    if service.get("s001_not_judged"):
        lines.append(f"S001 not judged: {service['s001_not_judged']}")
    loops = [x for x in service.get("loop") or () if isinstance(x, Mapping)]
    if any(x.get("probes") for x in loops):
        lines.append("busy: share of probes that found the user's code running on the loop")
    if loops:
        out.append(Section("Event loop (after start-up)", tables=[Table(
            ("pid", "lag p50 ms", "lag p99 ms", "lag max ms", "stalls", "blocked s", "busy", "blocked by"),
            [(str(x.get("pid")), x.get("lag_p50_ms"), x.get("lag_p99_ms"), x.get("lag_max_ms"), x.get("stall_count"),
              x.get("blocked_s"), _share(x), _site(x)) for x in loops],
        )], lines=lines))
    else:
        out.append(Section("Event loop (after start-up)", lines=[*lines, "no event loop was seen in the server"]))
    workers = service.get("workers")
    if isinstance(workers, Mapping) and workers.get("workers"):
        out.append(Section("Worker processes", tables=[Table(
            ("pid", "RSS MB", "private MB", "GPU MB", "command"),
            [(str(w.get("pid")), w.get("rss_mb"), w.get("private_mb"), w.get("gpu_memory_mb"), w.get("command"))
             for w in workers["workers"]],
        )], lines=[f"supervisor pid {workers.get('supervisor_pid')}" if workers.get("supervisor_pid")
                   else "single-process server"]))
    return out
