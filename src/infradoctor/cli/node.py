"""``infradoctor node``: health snapshot of this machine, or of recorded GPU evidence; ``--watch`` samples over time."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from infradoctor.node.watch import WatchSample

from infradoctor.cli.base import Command, add_result_options, finish, summary_stream

HISTORY_ROWS = 10
"""Rows of recent samples in the live view."""
SPARK_SAMPLES = 60
"""Samples in each sparkline of the live view."""
_SPARKS = "▁▂▃▄▅▆▇█"


class NodeCommand(Command):
    """Health snapshot of this machine: GPUs, Xid/ECC/throttling/PCIe, CPU, memory, disks, sockets, processes.

    GPUs are read through NVML, else `nvidia-smi -q -x`, else not at all (a note, not an error). Xid events come
    from dmesg, journalctl -k or /var/log/kern.log. Rules N001-N010 and N012 turn the evidence into findings;
    `infradoctor rules N003` explains one. `--smi-xml` (an `nvidia-smi -q -x` or `-q` report) / `--nvml-record`
    evaluate recorded GPU evidence from another machine; a file that cannot be read or holds no GPU evidence
    exits 3 before anything is probed or stored. `--watch` samples every `--interval` seconds (Ctrl-C stops it;
    the result summarises the samples, judges counters' growth over the watch, and `--record` keeps each sample
    as a JSON line).
    """

    name = "node"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Arguments."""
        from infradoctor.node.gpu import BACKEND_CHOICES

        gpu = parser.add_argument_group("GPU evidence")
        gpu.add_argument("--gpu-backend", choices=BACKEND_CHOICES, default="auto",
                         help="how to read GPUs: NVML, nvidia-smi XML, or not at all (default: auto)")
        gpu.add_argument("--smi-xml", metavar="FILE", type=Path,
                         help="evaluate a saved `nvidia-smi -q -x` (or `nvidia-smi -q` text) report instead of this "
                              "machine's GPUs")
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
        import infradoctor.node as node
        from infradoctor.node.snapshot import NodeRequest

        request = NodeRequest(
            gpu_backend=args.gpu_backend,
            smi_xml=args.smi_xml,
            nvml_record=args.nvml_record,
            kernel_log=args.kernel_log,
            host=not args.no_host,
            save_nvml_record=args.save_nvml_record,
            watch=args.watch,
            interval_s=args.interval,
            duration_s=args.duration,
            record=args.record,
        )
        if not request.watch:
            return finish(args, node.run(request))
        from rich.console import Console
        from rich.live import Live

        from infradoctor.node.diagnose import check_request

        check_request(request)
        stream = summary_stream(args)
        live = (Live(console=Console(file=stream), refresh_per_second=4, transient=False)
                if not args.quiet and stream.isatty() else None)

        def show(sample: WatchSample, samples: Sequence[WatchSample]) -> None:
            if live is not None:
                live.update(live_table(samples, args.interval))

        with live if live is not None else contextlib.nullcontext():
            result = node.run(request, on_sample=show)
        return finish(args, result)


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
