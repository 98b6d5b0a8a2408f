"""Kernel log lines (``dmesg``, ``dmesg -T``, ``dmesg --decode``, syslog/journal ``kernel:``, bare ``NVRM:`` lines).

GPU events come from :class:`infradoctor.xid.KernelLineReader`, the reader ``infradoctor node --kernel-log`` uses, so
``--format kernel`` accepts what ``node`` accepts: Xid lines bare or behind any prefix, "GPU has fallen off the bus"
without an Xid (as Xid 79), the root cause an Xid 45 names. Other kernel lines (OOM killer, call traces) are
searched for signatures like free text.
"""

from __future__ import annotations

import re

from infradoctor.logs.formats.base import DatedLineFormat, LineContext, LineHandler
from infradoctor.logs.formats.text import add_text_event
from infradoctor.logs.formats.timestamps import best_time
from infradoctor.logs.signatures import match_text_all
from infradoctor.logs.stats import LogStats
from infradoctor.xid import ACTION_RANK, UNKNOWN_DEVICE, KernelLineReader, normalise_pci

_DMESG = re.compile(r"\[\s{0,12}\d{1,12}\.\d{1,9}\] |\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} ")
_GPU_ADDRESS = re.compile(r"NVRM: GPU (?:at )?(?:PCI:)?([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?)")


def is_kernel_line(line: str, context: LineContext) -> bool:
    """A kernel line: a dmesg time stamp, the ``kernel`` program of its envelope, or the NVIDIA driver's ``NVRM:``."""
    return (context.program == "kernel" or "NVRM:" in line
            or (line[:1] == "[" and _DMESG.match(line) is not None))


class KernelFormat(DatedLineFormat):
    """Kernel log lines, bare or behind any envelope."""

    name = "kernel"

    def handler(self, stats: LogStats, context: LineContext) -> LineHandler:
        """Kernel lines: Xid events per (code, device, cause), other lines searched for signatures."""
        reader = KernelLineReader()
        year = self.year

        def handle(line: str, ctx: LineContext) -> bool:
            if not is_kernel_line(line, ctx):
                return False
            second = best_time(line, year, ctx.second)
            event = reader.feed(line)
            signatures = match_text_all(line)
            subject = ctx.source
            if event is not None:
                device = event.pci if event.pci == UNKNOWN_DEVICE else f"PCI:{normalise_pci(event.pci) or event.pci}"
                stats.xids[(event.code, device, event.caused_by or 0)] += 1
                info = event.info
                known = stats.xid_actions.get(event.code)
                if known is None or ACTION_RANK.get(info.action, 0) > ACTION_RANK.get(known, 0):
                    stats.xid_actions[event.code] = info.action
                stats.xid_examples.setdefault(event.code, event.message)
                subject = f"Xid {event.code} ({device})"
                if event.without_xid:
                    stats.bus_drops[device] += 1
                    subject = f"fallen off the bus ({device})"
                    signatures = ("gpu_fallen_off_bus",)
            elif reader.repeated:
                signatures = tuple(s for s in signatures if s != "gpu_fallen_off_bus")
            elif "gpu_init_failed" in signatures:
                found = _GPU_ADDRESS.search(line)
                subject = f"PCI:{normalise_pci(found.group(1))}" if found else subject
            add_text_event(stats, signatures, subject, second, ctx.raw or line)
            return True

        return handle
