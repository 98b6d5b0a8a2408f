"""N009 socket-exhaustion: ephemeral ports, TIME_WAIT sockets or file descriptors near their limits.

What it detects:
    Sockets, ephemeral ports or file descriptors run out. From ``infradoctor node``: sockets in TIME_WAIT reaching
    :data:`TIME_WAIT_FRACTION` of the ephemeral port range, local ports in the ephemeral range in use reaching
    :data:`EPHEMERAL_FRACTION` of it, this process's open file descriptors reaching :data:`FD_FRACTION` of its soft
    limit, or system-wide file handles reaching :data:`FD_FRACTION` of the maximum. From logs
    (``infradoctor logs``): "Cannot assign requested address" (EADDRNOTAVAIL: no free ephemeral port) and "Too many
    open files" (EMFILE).

Why it matters:
    A client or router that opens a new connection per request leaves one TIME_WAIT socket behind each (for about 60
    s); once the ephemeral ports for a destination are used up, ``connect()`` fails with ``EADDRNOTAVAIL`` ("Cannot
    assign requested address") and new connections fail although the peer is healthy: the service reports errors
    that have nothing to do with the model. Running out of file descriptors fails ``accept()``, ``open()`` and
    ``socket()`` with ``EMFILE``.

How it is measured:
    psutil ``net_connections("tcp")`` counted by state, local ports inside
    ``/proc/sys/net/ipv4/ip_local_port_range``; ``num_fds()`` against ``RLIMIT_NOFILE``; ``/proc/sys/fs/file-nr``
    against ``file-max``. TIME_WAIT is compared to the whole range (ports are per destination, so this is the
    conservative case of one busy destination). Severity ``high`` at :data:`HIGH_FRACTION` of a limit.

    From logs (`infradoctor logs`): Signature catalog matches merged into incidents per subject and time window.

Evidence:
    Every check gives:

    - ``source``: ``probe`` (``infradoctor node``; ``prometheus`` under ``infradoctor fleet``) or ``logs``.

    The probe measures how close the limits are, logs the failures once they are reached, so they share no number.
    From the probe: the ratios that reached their threshold (``time_wait_per_ephemeral_port``,
    ``ephemeral_ports_used_fraction``, ``process_fds_fraction``, ``system_fds_fraction``), ``tcp_by_state``,
    ``ephemeral_range``, ``process_fds``, ``process_fd_soft_limit``, ``system_file_handles``, ``system_file_max``.
    From logs: the incidents' summary: ``kinds``, ``count`` (log lines), ``failures``, ``incidents``, ``files``,
    ``subjects``, ``first``, ``last``, ``windows``, ``example``.

Fix:
    Reuse connections: keep-alive connection pools in clients (one ``httpx.Client``/``aiohttp.ClientSession`` per
    process, not per request) and upstream keep-alive in routers. Widen ``net.ipv4.ip_local_port_range``; raise the
    fd limit (``ulimit -n``, systemd ``LimitNOFILE``).
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.incidents import LogsRuleOptions, signature_findings
from infradoctor.node.evidence import NodeEvidence
from infradoctor.node.rules._common import NodeOptions

RULE = Rule(
    "N009",
    "socket-exhaustion",
    Severity.MEDIUM,
    "Sockets or ephemeral ports near exhaustion",
    fix="Reuse connections (keep-alive pools); widen net.ipv4.ip_local_port_range; raise the fd limit.",
    risk="Wider port ranges can collide with listening services.",
    commands=("node", "logs"),
)

TIME_WAIT_FRACTION = 0.5
"""TIME_WAIT sockets / ephemeral range size at which ports count as near exhaustion."""
EPHEMERAL_FRACTION = 0.5
"""Ephemeral ports in use / range size at which ports count as near exhaustion."""
FD_FRACTION = 0.8
"""Open file descriptors / limit at which descriptors count as near exhaustion."""
HIGH_FRACTION = 0.9
"""Share of any limit at which severity is high."""


@RULE.check(NodeEvidence, NodeOptions)
def check(evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """At most one finding for the host, listing every limit that is close."""
    host = evidence.host
    if host is None:
        return []
    ratios: dict[str, float] = {}
    parts: list[str] = []
    sockets = host.sockets
    size = sockets.ephemeral_range_size if sockets is not None else None
    if sockets is not None and size:
        tw = sockets.time_wait / size
        if tw >= options.threshold(RULE.code, "TIME_WAIT_FRACTION", TIME_WAIT_FRACTION):
            ratios["time_wait_per_ephemeral_port"] = tw
            parts.append(f"{sockets.time_wait} sockets in TIME_WAIT for {size} ephemeral ports")
        used = sockets.ephemeral_ports_in_use / size
        if used >= options.threshold(RULE.code, "EPHEMERAL_FRACTION", EPHEMERAL_FRACTION):
            ratios["ephemeral_ports_used_fraction"] = used
            parts.append(f"{sockets.ephemeral_ports_in_use} of {size} ephemeral ports in use")
    fds = host.fds
    fd_limit = options.threshold(RULE.code, "FD_FRACTION", FD_FRACTION)
    if fds.process_open is not None and fds.process_soft_limit:
        share = fds.process_open / fds.process_soft_limit
        if share >= fd_limit:
            ratios["process_fds_fraction"] = share
            parts.append(f"this process has {fds.process_open} of {fds.process_soft_limit} file descriptors open")
    if fds.system_allocated is not None and fds.system_max:
        share = fds.system_allocated / fds.system_max
        if share >= fd_limit:
            ratios["system_fds_fraction"] = share
            parts.append(f"{fds.system_allocated} of {fds.system_max} system file handles allocated")
    if not parts:
        return []
    severity = Severity.HIGH if max(ratios.values()) >= HIGH_FRACTION else None
    evidence_out: dict[str, object] = {"source": "probe", **{k: round(v, 4) for k, v in ratios.items()}}
    evidence_out.update(
        {
            "tcp_by_state": dict(sockets.tcp_by_state) if sockets is not None else None,
            "ephemeral_range": [sockets.ephemeral_low, sockets.ephemeral_high] if sockets is not None else None,
            "process_fds": fds.process_open,
            "process_fd_soft_limit": fds.process_soft_limit,
            "system_file_handles": fds.system_allocated,
            "system_file_max": fds.system_max,
        }
    )
    return [RULE.finding(
            "Near exhaustion: " + "; ".join(parts), evidence_out, severity=severity)]


@RULE.check(LogsEvidence, LogsRuleOptions)
def check_logs(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """One finding with every socket-exhaustion incident."""
    return signature_findings(evidence, RULE, ("socket_exhaustion",), "Socket or port exhaustion")
