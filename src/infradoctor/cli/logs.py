"""``infradoctor logs``: failure signatures and router-vs-upstream time (metrics: see ``infradoctor.logs``)."""

from __future__ import annotations

import argparse
import sys

from infradoctor.bounded import printable
from infradoctor.cli.base import Command, add_result_options, finish
from infradoctor.errors import EXIT_TARGET, UsageError


class LogsCommand(Command):
    """Find failure signatures, incidents and router-vs-upstream time in logs.

    Reads nginx access logs (any log_format; default combined; retries in $upstream_addr), nginx error logs, Envoy
    and Istio access logs (default, Istio or any format string incl. key=value; JSON), HAProxy httplog/tcplog (also
    JSON), JSON-lines and key=value app logs, Python tracebacks, model-server logs (vLLM, Triton, TorchServe),
    Kubernetes events and kernel logs (NVRM: Xid). Lines may come wrapped: kubectl --prefix/--timestamps, stern,
    docker compose, syslog (RFC 3164/5424), journald, CRI/containerd and docker json-file records are stripped,
    keeping their time and pod/container. --format auto sniffs each file from its first lines and reads a mixed file
    line by line, each line in the format that reads it; any other line is still searched for failure signatures.
    Large access logs are parsed with polars in flat memory; bad lines are counted, never fatal.

    Reports incidents (signature, upstream, time window, count, example lines), a per-upstream table (requests,
    error rate, p50/p99), the router's own time (request minus upstream time), retries, HAProxy queueing and a
    per-minute timeline.

    --router-stats-dump FILE (repeatable) adds a saved router statistics answer (Envoy /stats?format=json,
    /clusters, /stats/prometheus; HAProxy ;csv, show stat, show servers state; nginx stub_status): the router rules
    judge it from the router's start to the dump and their findings join the logs' (a /clusters or servers-state
    dump names the hosts of the dump before it). Without FILE only the dumps are read.

    FILE `-` reads standard input, e.g. `kubectl logs POD | infradoctor logs -` (format sniffed from its first
    lines, like a file). A file counts as unmeasured when it cannot be opened, is empty, cannot be read (a
    truncated .gz) before any line was parsed, or has no line in the format forced with --format. Exit 3 when no
    file yielded a parsed line (the partial result is still written and stored).
    """

    name = "logs"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Arguments."""
        from infradoctor.logs.formats.router import FORMAT_NAMES

        parser.add_argument("files", nargs="*", metavar="FILE",
                            help="log files (.gz, .xz, .bz2 are fine); - reads standard input")
        parser.add_argument("--router-stats-dump", action="append", default=[], metavar="FILE",
                            help="a saved router statistics answer (Envoy, HAProxy, nginx) to judge too; repeatable")
        parser.add_argument("--format", choices=FORMAT_NAMES, default="auto",
                            help="format of every file (default: sniff each file)")
        parser.add_argument("--nginx-log-format", metavar="STR",
                            help="the nginx log_format string of the access logs, e.g. "
                                 "'$remote_addr [$time_local] \"$request\" $status $request_time $upstream_addr'")
        parser.add_argument("--envoy-log-format", metavar="STR",
                            help="the Envoy access-log format string, for layouts other than Envoy's and Istio's "
                                 "(e.g. key=value with %%START_TIME(%%d/%%m/%%YT%%H:%%M:%%S%%z)%%)")
        parser.add_argument("--engine", choices=("auto", "polars", "python"), default="auto",
                            help="access-log engine: polars for files over 8 MB when installed (default), or force one")
        parser.add_argument("--min-requests", type=int, default=20, metavar="N",
                            help="request-based rules need at least N requests (default 20)")
        add_result_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Analyse the files, store and print the result."""
        from infradoctor.logs.analyze import STDIN, LogsOptions, run
        from infradoctor.logs.formats.layout import FormatError
        from infradoctor.logs.incidents import LogsRuleOptions
        from infradoctor.logs.metrics import LogsMetrics

        if args.min_requests < 1:
            raise UsageError("--min-requests must be at least 1")
        if not args.files and not args.router_stats_dump:
            raise UsageError("give log files, or --router-stats-dump FILE, or both")
        options = LogsOptions(files=tuple(args.files), format=args.format, nginx_log_format=args.nginx_log_format,
                              envoy_log_format=args.envoy_log_format, engine=args.engine,
                              rules=LogsRuleOptions(min_requests=args.min_requests),
                              router_stats_dumps=tuple(args.router_stats_dump))
        stdin = None
        if args.files.count(STDIN) > 1:
            raise UsageError("'-' (standard input) can be given only once")
        if STDIN in args.files:
            if sys.stdin is None or sys.stdin.isatty():
                raise UsageError("'-' reads the log from standard input, which is a terminal; pipe a log in, "
                                 "e.g. kubectl logs POD | infradoctor logs -")
            stdin = sys.stdin.buffer
        try:
            result = run(options, stdin=stdin)
        except FormatError as exc:
            raise UsageError(str(exc)) from None
        code = finish(args, result)
        if not args.files:  # router statistics dumps only: unmeasured when none could be read
            if any(d["kind"] for d in result.target["router_stats_dumps"]):
                return code
            print("infradoctor logs: error: no --router-stats-dump could be read (the result's errors say why)",
                  file=sys.stderr)
            return max(code, EXIT_TARGET)
        files = LogsMetrics.from_dict(result.metrics).files
        if not any(f.parsed for f in files):
            unmeasured = ", ".join(f"{f.file} ({f.error or 'no line parsed'})" for f in files)
            print(f"infradoctor logs: error: no file yielded a parsed line: {printable(unmeasured)}", file=sys.stderr)
            return max(code, EXIT_TARGET)
        return code


COMMAND = LogsCommand()
