"""``infradoctor fleet``: the incident window across every node, from Prometheus."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from infradoctor.cli.base import Command, add_result_options, finish, positive_seconds, summary_stream
from infradoctor.errors import EXIT_TARGET, UsageError

if TYPE_CHECKING:
    from infradoctor.fleet.run import FleetOptions
    from infradoctor.result import Result


class FleetCommand(Command):
    """The incident window across every node from Prometheus: the same rules per node and GPU, stragglers, onset.

    Asks Prometheus (or Thanos, Mimir, VictoriaMetrics) for the window's evidence, aggregated server-side:
    dcgm-exporter (Xid, ECC, retired pages and row remaps, throttle reasons, memory, temperature, power, clocks,
    utilisation), node_exporter (CPU, memory, swap, disks, file handles, TIME_WAIT), kube-state-metrics
    (restarts, OOM kills, crash loops, pods not ready, pending GPU pods), Envoy and HAProxy upstreams and vLLM,
    TGI and Triton queues. Each node is judged by the rules of `infradoctor node`; N013 compares every GPU with its
    peers, N014 reads container restarts, N015 names the first problem and the change before it (--changes).
    Evidence an exporter did not provide is reported as absent ("no dcgm-exporter series for 3 of 40 nodes"),
    never as healthy.

    Credentials never go on the command line or into the result: a bearer token from
    $INFRADOCTOR_PROMETHEUS_TOKEN or --bearer-token-file, basic auth from $INFRADOCTOR_PROMETHEUS_USER and
    $INFRADOCTOR_PROMETHEUS_PASSWORD or --basic-auth-file (one line user:password).
    --changes FILE: one change per line, `TIME description` (ISO-8601 or unix seconds) or JSON lines
    {"at": ..., "description": ..., "node": ...}.
    --emit-alert-rules FILE writes Prometheus alerting rules for what the rules check, thresholds from a healthy
    baseline window (--baseline-from/--baseline-to; default the day before the window).
    Exit status 3 when Prometheus cannot be reached.
    """

    name = "fleet"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Arguments."""
        parser.add_argument("--prometheus", metavar="URL", required=True,
                            help="base URL of the Prometheus HTTP API, e.g. http://prometheus:9090")
        when = parser.add_argument_group("window")
        when.add_argument("--window", metavar="DUR", help="length of the window ending at --to (default 1h)")
        when.add_argument("--from", dest="start", metavar="T", help="window start: ISO-8601, unix seconds, now-2h")
        when.add_argument("--to", dest="end", metavar="T", help="window end (default now)")
        when.add_argument("--step", metavar="DUR", help="range-query step (default: sized to about 120 points)")
        scope = parser.add_argument_group("scope")
        scope.add_argument("--selector", metavar="SEL",
                           help="label selector every query carries, e.g. '{cluster=\"a\"}'")
        scope.add_argument("--node-label", metavar="LABEL", default="instance",
                           help="label naming the node (default instance, its port removed; e.g. Hostname)")
        scope.add_argument("--role-label", metavar="LABEL",
                           help="label splitting peers into roles for the straggler check (e.g. job)")
        scope.add_argument("--changes", metavar="FILE", help="deploy / config-change times to relate to the onset")
        auth = parser.add_argument_group("credentials (never stored)")
        auth.add_argument("--bearer-token-file", metavar="FILE", help="file holding a bearer token")
        auth.add_argument("--basic-auth-file", metavar="FILE", help="file holding one line user:password")
        parser.add_argument("--timeout", metavar="S", type=positive_seconds, default=30.0,
                            help="per-query timeout in seconds (default 30)")
        alerts = parser.add_argument_group("alert rules")
        alerts.add_argument("--emit-alert-rules", metavar="FILE", type=Path,
                            help="write Prometheus alerting rules with thresholds from the baseline window")
        alerts.add_argument("--baseline-from", metavar="T", help="healthy baseline start (default: window start - 1d)")
        alerts.add_argument("--baseline-to", metavar="T", help="healthy baseline end (default: the window start)")
        add_result_options(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Query, judge, report; 3 when Prometheus cannot be reached."""
        from infradoctor.fleet.prom import Credentials, CredentialsError
        from infradoctor.fleet.queries import SelectorError, check_label, selector_matchers
        from infradoctor.fleet.run import FleetOptions, run
        from infradoctor.fleet.window import WindowError, make_window, read_changes

        now = time.time()
        try:
            window = make_window(now, window=args.window, start=args.start, end=args.end, step=args.step)
            selector_matchers(args.selector)
            check_label(args.node_label, "--node-label")
            if args.role_label:
                check_label(args.role_label, "--role-label")
            changes, bad = read_changes(args.changes, now) if args.changes else ([], [])
            credentials = Credentials.load(bearer_token_file=args.bearer_token_file,
                                           basic_auth_file=args.basic_auth_file)
        except (WindowError, SelectorError, CredentialsError) as exc:
            raise UsageError(str(exc)) from None
        stream = summary_stream(args)
        show = not args.quiet and stream.isatty()

        def progress(what: str) -> None:
            if show:
                stream.write(f"\rinfradoctor fleet: asking Prometheus for {what} ...\x1b[K")
                stream.flush()

        try:
            options = FleetOptions(prometheus=args.prometheus, window=window, selector=args.selector,
                                   node_label=args.node_label, role_label=args.role_label, changes=tuple(changes),
                                   credentials=credentials, timeout_s=args.timeout, problems=tuple(bad),
                                   progress=progress)
            result = run(options)
        except ValueError as exc:  # a URL that is not http(s), credentials in the URL
            raise UsageError(str(exc)) from None
        if show:
            stream.write("\r\x1b[K")
        reachable = bool(result.metrics.get("prometheus", {}).get("reachable", True))
        if args.emit_alert_rules is not None and reachable:
            result = _emit_alert_rules(args, options, result, now)
        code = finish(args, result)
        return EXIT_TARGET if not reachable else code


def _emit_alert_rules(args: argparse.Namespace, options: FleetOptions, result: Result, now: float) -> Result:
    """Read the baseline, write the rule file, note its path in the result."""
    from infradoctor.fleet.alerts import alert_rules, read_baseline, render_rules
    from infradoctor.fleet.evidence import Window
    from infradoctor.fleet.prom import PrometheusClient
    from infradoctor.fleet.queries import Scope, selector_matchers
    from infradoctor.fleet.window import WindowError, nice_step, parse_time
    from infradoctor.result import ErrorNote
    try:
        end = parse_time(args.baseline_to, now) if args.baseline_to else options.window.start
        start = parse_time(args.baseline_from, now) if args.baseline_from else end - 86400.0
    except WindowError as exc:
        raise UsageError(str(exc)) from None
    if start >= end:
        raise UsageError("--baseline-from must be before --baseline-to")
    baseline_window = Window(start, end, nice_step(end - start))
    client = PrometheusClient(options.prometheus, credentials=options.credentials, timeout_s=options.timeout_s)
    matchers = selector_matchers(options.selector)
    scope = Scope(matchers, baseline_window.range, f"{baseline_window.step_s:g}s", options.node_label)
    baseline, problems = read_baseline(client, baseline_window, scope)
    text = render_rules(alert_rules(baseline, matchers))
    try:
        args.emit_alert_rules.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write --emit-alert-rules {args.emit_alert_rules}: {exc.strerror or exc}") from None
    print(f"infradoctor fleet: wrote {text.count('- alert:')} alerting rules to {args.emit_alert_rules}",
          file=sys.stderr)
    metrics = dict(result.metrics)
    metrics["alert_rules"] = str(args.emit_alert_rules)
    return result.with_(metrics=metrics, errors=(*result.errors, *(ErrorNote("fleet.baseline", p) for p in problems)))


COMMAND = FleetCommand()
