"""Kernel log lines (``dmesg``, ``dmesg -T``, syslog/journal ``kernel:``): GPU Xid errors and other signatures."""

from __future__ import annotations

import re

from infradoctor.logs.formats.base import DatedLineFormat, LineHandler
from infradoctor.logs.formats.text import add_text_event
from infradoctor.logs.formats.timestamps import line_time
from infradoctor.logs.signatures import match_text
from infradoctor.logs.stats import LogStats
from infradoctor.xid import parse_xid_line


class KernelFormat(DatedLineFormat):
    """Kernel log lines: ``dmesg`` (``[ 1234.5678] NVRM: Xid ...``), ``dmesg -T``, syslog/journal ``kernel:`` lines."""

    name = "kernel"
    _LINE = re.compile(r"^\[\s*\d+\.\d+\] |\bkernel: |^<\d>\[|^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} ")

    def handler(self, stats: LogStats, source_name: str) -> LineHandler:
        """Match kernel lines; Xid lines count per (code, device) and become events per code."""
        line_re = self._LINE

        def handle(line: str) -> bool:
            if not line_re.search(line):
                return False
            signature = match_text(line)
            subject = source_name
            if signature == "gpu_xid":
                xid = parse_xid_line(line)
                if xid:
                    code, device = xid.code, f"PCI:{xid.pci}"
                    stats.xids[(code, device)] += 1
                    subject = f"Xid {code} ({device})"
            add_text_event(stats, signature, subject, line_time(line, self.year), line)
            return True

        return handle
