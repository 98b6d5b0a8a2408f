"""``infradoctor node``: health snapshot of this machine, or of recorded GPU evidence; ``--watch`` samples over time."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from infradoctor.node.snapshot import NodeRequest
    from infradoctor.node.watch import WatchSample
    from infradoctor.result import Result

from infradoctor.cli.base import Command, add_result_options, finish, summary_stream
from infradoctor.errors import EXIT_TARGET, UsageError

HISTORY_ROWS = 10
"""Rows of recent samples in the live view."""
SPARK_SAMPLES = 60
"""Samples in each sparkline of the live view."""
_SPARKS = "▁▂▃▄▅▆▇█"


class NodeCommand(Command):
    """Health snapshot of this machine: GPUs, Xid/ECC/throttling/PCIe, CPU, memory, disks, sockets, processes.

    GPUs are read through NVML, else `nvidia-smi -q -x`, else not at all (a note, not an error). Xid events come
    from dmesg, journalctl -k or /var/log/kern.log. Rules N001-N010 and N012 turn the evidence into findings;
    `infradoctor rules N003` explains one. `--smi-xml` / `--nvml-record` evaluate recorded GPU evidence from
    another machine. `--watch` samples every `--interval` seconds (Ctrl-C stops it; the result summarises the
    samples and `--record` keeps each one as a JSON line).
    """

    name = "node"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Arguments."""
        from infradoctor.node.gpu import BACKEND_CHOICES

        gpu = parser.add_argument_group("GPU evidence")
        gpu.add_argument("--gpu-backend", choices=BACKEND_CHOICES, default="auto",
                         help="how to read GPUs: NVML, nvidia-smi XML, or not at all (default: auto)")
        gpu.add_argument("--smi-xml", metavar="FILE", type=Path,
                         help="evaluate a saved `nvidia-smi -q -x` document instead of this machine's GPUs")
        gpu.add_argument("--nvml-record", metavar="FILE", type=Path,
                         help="evaluate recorded NVML values (see --save-nvml-record) instead of this machine's GPUs")
        gpu.add_argument("--save-nvml-record", metavar="FILE", type=Path,
                         help="also record this machine's NVML values to FILE (to evaluate elsewhere)")
        parser.add_argument("--kernel-log", metavar="FILE", type=Path,
                            help="read Xid events from FILE instead of dmesg / journalctl -k / kern.log")
        parser.add_argument("--no-host", action="store_true",
                            help="skip the host probe (CPU, memory, disks, sockets, processes)")
        watch_group = parser.add_argument_group("watch")
        watch_group.add_argument("--watch", action="store_true", help="sample repeatedly with a live view")
        watch_group.add_argument("--interval", type=float, default=1.0, metavar="S",
                                 help="seconds between samples (default 1)")
        watch_group.add_argument("--duration", type=float, metavar="S",
                                 help="stop after S seconds (default: until Ctrl-C, at most a day)")
        watch_group.add_argument("--record", metavar="FILE", type=Path,
                                 help="write every sample to FILE as JSON lines")
        add_result_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Probe, evaluate, report."""
        from infradoctor.node.gpu.nvml import record_live_nvml
        from infradoctor.node.snapshot import NodeRequest, build_result, collect_evidence
        from infradoctor.node.watch import MIN_INTERVAL_S
        from infradoctor.result import utc_now_iso

        if args.smi_xml is not None and args.nvml_record is not None:
            raise UsageError("give either --smi-xml or --nvml-record, not both")
        if not args.watch and (args.record is not None or args.duration is not None):
            raise UsageError("--record and --duration need --watch")
        if args.interval < MIN_INTERVAL_S:
            raise UsageError(f"--interval must be at least {MIN_INTERVAL_S} s")
        if args.duration is not None and args.duration < 0:
            raise UsageError("--duration must not be negative")
        request = NodeRequest(
            gpu_backend=args.gpu_backend,
            smi_xml=args.smi_xml,
            nvml_record=args.nvml_record,
            kernel_log=args.kernel_log,
            host=not args.no_host,
        )
        started_at = utc_now_iso()
        start = time.perf_counter()
        if args.save_nvml_record is not None:
            try:
                record_live_nvml(args.save_nvml_record)
            except OSError as exc:
                raise UsageError(f"cannot write --save-nvml-record {args.save_nvml_record}: {exc}") from exc
        if args.watch:
            result = self._watch(args, request, started_at, start)
        else:
            evidence = collect_evidence(request)
            result = build_result(request, evidence, started_at=started_at, duration_s=time.perf_counter() - start)
        code = finish(args, result)
        unreadable = _unreadable_inputs(request, result)
        if unreadable:
            for message in unreadable:
                print(f"infradoctor node: error: {message}", file=sys.stderr)
            return max(code, EXIT_TARGET)
        return code

    def _watch(self, args: argparse.Namespace, request: NodeRequest, started_at: str, start: float) -> Result:
        from rich.console import Console
        from rich.live import Live

        from infradoctor.node.snapshot import build_result, collect_evidence, open_backend
        from infradoctor.node.watch import NodeSampler, distributions, summarize, watch, write_record_line
        from infradoctor.result import utc_now_iso

        backend, selection_notes = open_backend(request)
        sampler = NodeSampler(backend)
        samples: list[WatchSample] = []
        interrupted = False
        stream = summary_stream(args)
        live_view = not args.quiet and stream.isatty()
        record: TextIO | None = None
        try:
            if args.record is not None:
                try:
                    record = args.record.open("w", encoding="utf-8")
                except OSError as exc:
                    raise UsageError(f"cannot write --record {args.record}: {exc.strerror or exc}") from exc
            console = Console(file=stream)
            live = Live(console=console, refresh_per_second=4, transient=False) if live_view else None
            with live if live is not None else contextlib.nullcontext():
                try:
                    for sample in watch(sampler, interval_s=args.interval, duration_s=args.duration,
                                        wall_clock=utc_now_iso):
                        if record is not None:  # written before it counts, so the file holds every sample
                            write_record_line(record, sample)
                        samples.append(sample)
                        if live is not None:
                            live.update(live_table(samples, args.interval))
                except KeyboardInterrupt:
                    interrupted = True
            summary = summarize(samples, interval_s=args.interval, interrupted=interrupted)
            evidence = collect_evidence(request, backend=backend, watch=summary)
        finally:
            if record is not None:
                record.close()
            backend.close()
        if selection_notes:
            evidence = dataclasses.replace(evidence, notes=(*selection_notes, *evidence.notes))
        return build_result(
            request,
            evidence,
            started_at=started_at,
            duration_s=time.perf_counter() - start,
            distributions=distributions(samples),
        )


def _unreadable_inputs(request: NodeRequest, result: Result) -> list[str]:
    """Messages for input files the user named that could not be used."""
    named = [str(p) for p in (request.smi_xml, request.nvml_record, request.kernel_log) if p is not None]
    return [e.message for e in result.errors if any(path in e.message for path in named)]


def sparkline(values: Sequence[float | None], *, top: float = 100.0) -> str:
    """Block characters for values in 0..top (a space where a value is missing)."""
    out = []
    for value in values:
        if value is None:
            out.append(" ")
            continue
        share = max(0.0, min(1.0, value / top)) if top > 0 else 0.0
        out.append(_SPARKS[min(len(_SPARKS) - 1, int(share * len(_SPARKS)))])
    return "".join(out)


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def live_table(samples: Sequence[WatchSample], interval_s: float) -> Group:
    """The live view: recent host samples, then one row per GPU with a utilisation sparkline."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    latest = samples[-1].values
    gpu_ids = sorted({name.split("_", 1)[0] for name in latest if name.startswith("gpu")}, key=lambda g: int(g[3:]))
    recent = samples[-SPARK_SAMPLES:]
    title = Text(f"sample {samples[-1].index + 1}, every {interval_s:g} s (Ctrl-C to stop)", style="bold")
    host = Table(show_edge=False, header_style="bold")
    for column in ("t s", "cpu %", "load", "mem %", "swap %"):
        host.add_column(column, justify="right")
    host.add_column("cpu % history")
    cpu_history = sparkline([s.values.get("cpu_util_pct") for s in recent])
    history = samples[-HISTORY_ROWS:]
    for i, sample in enumerate(history):
        v = sample.values
        load = v.get("load_1m")
        host.add_row(f"{sample.t_s:.0f}", _fmt(v.get("cpu_util_pct")), "–" if load is None else f"{load:.2f}",
                     _fmt(v.get("mem_used_pct")), _fmt(v.get("swap_used_pct")),
                     cpu_history if i == len(history) - 1 else "")
    parts: list[Table | Text] = [title, host]
    if gpu_ids:
        gpus = Table(show_edge=False, header_style="bold")
        for column in ("gpu", "util %", "mem %", "temp C", "power W", "SM MHz", "throttled"):
            gpus.add_column(column, justify="right")
        gpus.add_column("util % history")
        for gpu in gpu_ids:
            gpus.add_row(
                gpu[3:], *(_fmt(latest.get(f"{gpu}_{k}")) for k in ("util_pct", "mem_used_pct", "temp_c", "power_w",
                                                                      "sm_clock_mhz")),
                "yes" if latest.get(f"{gpu}_throttle") else "no",
                sparkline([s.values.get(f"{gpu}_util_pct") for s in recent]),
            )
        parts.append(gpus)
    return Group(*parts)


COMMAND = NodeCommand()
