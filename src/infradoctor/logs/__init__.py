"""``infradoctor logs``: failure signatures, incidents and router-vs-upstream time from router, app and kernel logs.

Library entry: ``infradoctor.logs.run(LogsOptions(files=(...)))`` returns the :class:`~infradoctor.result.Result`
(nothing printed or stored); its ``metrics`` are :class:`~infradoctor.logs.metrics.LogsMetrics` (every field
documented there and in the shipped schema's ``logsMetrics``).

Layout: ``source`` reads files safely (bounded lines, compression by magic bytes); ``envelope`` strips the prefixes
and wrappers collectors add (kubectl, stern, compose, syslog, journald, CRI, docker json-file...); ``formats/`` has
one parser per format behind :class:`~infradoctor.logs.formats.LogFormat` and the router that hands each line to the
format that reads it (access logs compiled from nginx ``log_format`` / Envoy format strings, with a polars engine for
large files; Envoy/Istio text by shape; HAProxy; nginx error; JSON and key=value; kernel; free text); every parser
fills the bounded accumulator :class:`~infradoctor.logs.stats.LogStats`; ``evidence`` reduces it to
:class:`~infradoctor.logs.evidence.LogsEvidence`; the rules (in the rule module of each code, and ``logs/rules`` for
the codes only logs emits) turn evidence into findings; ``analyze`` builds the result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infradoctor._lazy import lazy_exports

if TYPE_CHECKING:
    from infradoctor.logs.analyze import LogsOptions, analyze_logs, run
    from infradoctor.logs.evidence import LogsEvidence
    from infradoctor.logs.incidents import LogsRuleOptions
    from infradoctor.logs.metrics import LogsMetrics

__getattr__ = lazy_exports(__name__, {
    "LogsOptions": "analyze",
    "analyze_logs": "analyze",
    "run": "analyze",
    "LogsEvidence": "evidence",
    "LogsRuleOptions": "incidents",
    "LogsMetrics": "metrics",
})

__all__ = ["LogsEvidence", "LogsMetrics", "LogsOptions", "LogsRuleOptions", "analyze_logs", "run"]
