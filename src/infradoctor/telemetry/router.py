"""Routers' own statistics, read from what their admin endpoints answer: Envoy, HAProxy, nginx, Prometheus.

One snapshot per read (:class:`RouterSnapshot`): router-wide values under canonical names (counters and gauges,
summed over clusters/backends; :data:`COUNTERS`, :data:`GAUGES`), limits (circuit breakers, queue limits), and
one :class:`HostState` per upstream host with the router's own name for it (HAProxy server name, Envoy hostname)
and its address, so a response header that names ``b1`` can be matched to ``127.0.0.1:8001``.

Shapes (tests/corpus/metrics/NAMES.md and recordings of a real Envoy 1.40 and HAProxy under tests/corpus/metrics):

- Envoy ``/stats?format=json`` (``cluster.<name>.<stat>``), ``/stats/prometheus`` (``envoy_cluster_<stat>`` with
  ``envoy_cluster_name``), ``/clusters?format=json`` and the text ``/clusters`` (per-host health flags and stats).
- HAProxy stats CSV (``show stat`` or the stats page's ``;csv``; columns by header name), ``show servers state``
  and the Prometheus exporter (``haproxy_backend_*``, ``haproxy_server_*``).
- nginx ``stub_status``, and nginx-prometheus-exporter's reading of it (``nginx_connections_*``,
  ``nginx_http_requests_total``, ``nginx_up``).
- Traefik's Prometheus names; any other Prometheus endpoint is read and kept as ``prometheus`` with no canonical
  values (a note says so).

:func:`parse_router_stats` detects the kind from the answer and never raises: a body it cannot read is a
snapshot of kind ``unknown`` with the reason in ``problem``. A saved dump (``curl .../stats?format=json >
envoy.json``) goes through the same function (``infradoctor logs`` can call it on a file's bytes).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infradoctor.bounded import load_json, read_float
from infradoctor.metrics import Metrics
from infradoctor.telemetry import prometheus

MAX_BODY_BYTES = 8_000_000
"""A stats answer longer than this is cut there (and the snapshot says so)."""

MAX_HOSTS = 1000
"""Hosts kept per snapshot."""

COUNTERS = frozenset({
    "requests", "retries", "retry_success", "retry_overflow", "retry_limit_exceeded", "retry_backoff",
    "pending_total", "pending_overflow", "pending_failure_eject", "none_healthy", "connect_fail", "connect_timeout",
    "request_timeout", "panic", "membership_change", "ejections_enforced", "health_check_failure",
    "responses_5xx", "server_responses_5xx", "redispatches", "accepts", "handled", "client_requests",
})
"""Canonical counters (judged by their growth over the run)."""

GAUGES = frozenset({
    "pending_active", "pending_max", "requests_active", "connections_active", "queue_time_ms",
    "breaker_pending_open", "breaker_connections_open", "breaker_requests_open", "breaker_retries_open",
    "membership_healthy", "membership_total", "membership_degraded", "ejections_active",
    "reading", "writing", "waiting",
})
"""Canonical gauges (judged as series over the run)."""

ENVOY_STATS: Mapping[str, str] = {
    "upstream_rq_total": "requests",
    "upstream_rq_retry": "retries",
    "upstream_rq_retry_success": "retry_success",
    "upstream_rq_retry_overflow": "retry_overflow",
    "upstream_rq_retry_limit_exceeded": "retry_limit_exceeded",
    "upstream_rq_retry_backoff_exponential": "retry_backoff",
    "upstream_rq_retry_backoff_ratelimited": "retry_backoff",
    "upstream_rq_pending_total": "pending_total",
    "upstream_rq_pending_overflow": "pending_overflow",
    "upstream_rq_pending_failure_eject": "pending_failure_eject",
    "upstream_cx_none_healthy": "none_healthy",
    "upstream_cx_connect_fail": "connect_fail",
    "upstream_cx_connect_timeout": "connect_timeout",
    "upstream_rq_timeout": "request_timeout",
    "lb_healthy_panic": "panic",
    "membership_change": "membership_change",
    "outlier_detection.ejections_enforced_total": "ejections_enforced",
    "health_check.failure": "health_check_failure",
    "upstream_rq_5xx": "server_responses_5xx",
    "upstream_rq_pending_active": "pending_active",
    "upstream_rq_active": "requests_active",
    "upstream_cx_active": "connections_active",
    "circuit_breakers.default.rq_pending_open": "breaker_pending_open",
    "circuit_breakers.default.cx_open": "breaker_connections_open",
    "circuit_breakers.default.rq_open": "breaker_requests_open",
    "circuit_breakers.default.rq_retry_open": "breaker_retries_open",
    "membership_healthy": "membership_healthy",
    "membership_total": "membership_total",
    "membership_degraded": "membership_degraded",
    "outlier_detection.ejections_active": "ejections_active",
}
"""Envoy cluster stats (``cluster.<name>.<stat>``) and their canonical names."""

_ROUTER_PREFIXES = ("envoy_cluster_", "envoy_http_downstream_rq_total", "haproxy_", "traefik_", "nginx_")

_ENVOY_BY_PROM = {"envoy_cluster_" + k.replace(".", "_"): v for k, v in ENVOY_STATS.items()}

HAPROXY_BACKEND: Mapping[str, str] = {
    "qcur": "pending_active", "qmax": "pending_max", "scur": "requests_active", "qtime": "queue_time_ms",
    "econ": "connect_fail", "wretr": "retries", "wredis": "redispatches", "hrsp_5xx": "responses_5xx",
    "stot": "requests", "chkdown": "membership_change",
}
"""HAProxy CSV columns of a BACKEND row and their canonical names."""

HAPROXY_PROM: Mapping[str, str] = {
    "haproxy_backend_current_queue": "pending_active",
    "haproxy_backend_max_queue": "pending_max",
    "haproxy_backend_current_sessions": "requests_active",
    "haproxy_backend_queue_time_average_seconds": "queue_time_ms",
    "haproxy_backend_connection_errors_total": "connect_fail",
    "haproxy_backend_retry_warnings_total": "retries",
    "haproxy_backend_redispatch_warnings_total": "redispatches",
    "haproxy_backend_sessions_total": "requests",
    "haproxy_backend_check_up_down_total": "membership_change",
}
"""HAProxy Prometheus exporter names (backend level) and their canonical names."""

TRAEFIK_PROM: Mapping[str, str] = {
    "traefik_service_requests_total": "requests",
    "traefik_service_retries_total": "retries",
    "traefik_service_open_connections": "connections_active",
}
"""Traefik's Prometheus names and their canonical names."""

NGINX_PROM: Mapping[str, str] = {
    "nginx_http_requests_total": "client_requests",
    "nginx_connections_accepted": "accepts",
    "nginx_connections_handled": "handled",
    "nginx_connections_active": "connections_active",
    "nginx_connections_reading": "reading",
    "nginx_connections_writing": "writing",
    "nginx_connections_waiting": "waiting",
}
"""nginx-prometheus-exporter's names (its reading of ``stub_status``) and their canonical names."""


@dataclass(frozen=True)
class HostState(Metrics):
    """One upstream host as the router sees it."""

    name: str
    """The router's name for it: HAProxy server name, Envoy hostname, else its address."""
    address: str | None
    """``host:port`` it connects to, when the router says."""
    group: str
    """Envoy cluster or HAProxy backend it belongs to."""
    state: str
    """``healthy``, ``failing`` (failing checks, may still get traffic), ``ejected`` (outlier detection),
    ``down`` (out of rotation), ``maint``, ``draining`` or ``unknown``."""
    flags: str = ""
    """The router's own words: Envoy health flags (``/failed_active_hc``), HAProxy status (``UP 1/3``)."""
    counters: dict[str, float] = field(default_factory=dict)
    """Per-host counters (Envoy ``cx_connect_fail``, ``rq_error``, ``rq_total``; HAProxy ``econ``, ``hrsp_5xx``,
    ``chkfail``, ``stot``)."""


@dataclass(frozen=True)
class RouterSnapshot:
    """One read of a router's statistics."""

    kind: str
    """``envoy``, ``haproxy``, ``nginx``, ``traefik``, ``prometheus`` or ``unknown``."""
    source: str
    """Where it was read (URL or file)."""
    values: Mapping[str, float] = field(default_factory=dict)
    """Canonical counters and gauges (:data:`COUNTERS`, :data:`GAUGES`), summed over clusters/backends."""
    limits: Mapping[str, float] = field(default_factory=dict)
    """Configured limits: ``max_pending_requests``, ``max_connections``, ``max_retries``, ``queue_limit``."""
    hosts: tuple[HostState, ...] = ()
    """Upstream hosts, where the answer lists them."""
    format: str = ""
    """The answer's shape: ``envoy-json``, ``envoy-clusters-json``, ``envoy-clusters-text``, ``haproxy-csv``, ..."""
    problem: str | None = None
    """Why (part of) the answer could not be read, or None."""

    def merged(self, other: RouterSnapshot) -> RouterSnapshot:
        """This snapshot with another read of the same router (e.g. Envoy's ``/clusters``) folded in."""
        return RouterSnapshot(
            kind=self.kind if self.kind != "unknown" else other.kind,
            source=self.source,
            values={**other.values, **self.values},
            limits={**other.limits, **self.limits},
            hosts=self.hosts or other.hosts,
            format="+".join(f for f in (self.format, other.format) if f),
            problem=self.problem or other.problem,
        )


def _add(values: dict[str, float], key: str, value: float | None) -> None:
    if value is not None:
        values[key] = values.get(key, 0.0) + value


def parse_envoy_stats_json(data: Any, source: str = "") -> RouterSnapshot:
    """Envoy ``/stats?format=json``: cluster stats summed over clusters (names with dots in them included)."""
    values: dict[str, float] = {}
    stats = data.get("stats") if isinstance(data, dict) else None
    if not isinstance(stats, list):
        return RouterSnapshot("unknown", source, problem="JSON without a 'stats' list", format="json")
    for entry in stats:
        if not isinstance(entry, dict):
            continue
        name = entry.get("name")
        if isinstance(name, str) and name.startswith("http.") and name.endswith(".downstream_rq_total") \
                and name != "http.admin.downstream_rq_total":
            _add(values, "client_requests", read_float(entry.get("value"), low=0))  # what clients sent Envoy
            continue
        if not isinstance(name, str) or not name.startswith("cluster.") or len(name) > 1000:
            continue
        # the stat is the last one to three dotted parts; the cluster name before it may hold dots itself
        parts = name.rsplit(".", 3)
        for size in (1, 2, 3):
            key = ENVOY_STATS.get(".".join(parts[-size:])) if len(parts) > size + 1 else None
            if key is not None:
                _add(values, key, read_float(entry.get("value"), low=0))
                break
    return RouterSnapshot("envoy", source, values, format="envoy-json")


def _envoy_health(status: Mapping[str, Any]) -> tuple[str, str]:
    flags = []
    for key, flag in (("failed_active_health_check", "/failed_active_hc"),
                      ("failed_outlier_check", "/failed_outlier_check"),
                      ("failed_active_degraded_check", "/degraded_active_hc"),
                      ("pending_dynamic_removal", "/pending_dynamic_removal"),
                      ("pending_active_hc", "/pending_active_hc"),
                      ("excluded_via_immediate_hc_fail", "/excluded_via_immediate_hc_fail"),
                      ("active_hc_timeout", "/active_hc_timeout")):
        if status.get(key) is True:
            flags.append(flag)
    eds = status.get("eds_health_status")
    if isinstance(eds, str) and eds not in ("HEALTHY", "UNKNOWN"):
        flags.append("/failed_eds_health")
    return _envoy_state("".join(flags)), "".join(flags) or "healthy"


def _envoy_state(flags: str) -> str:
    if "/failed_outlier_check" in flags:
        return "ejected"
    if "/failed_active_hc" in flags or "/failed_eds_health" in flags or "/active_hc_timeout" in flags:
        return "failing"
    if "/pending_dynamic_removal" in flags:
        return "draining"
    return "healthy"


def parse_envoy_clusters_json(data: Any, source: str = "") -> RouterSnapshot:
    """Envoy ``/clusters?format=json``: hosts with health flags, names and stats; circuit-breaker limits."""
    clusters = data.get("cluster_statuses") if isinstance(data, dict) else None
    if not isinstance(clusters, list):
        return RouterSnapshot("unknown", source, problem="JSON without 'cluster_statuses'", format="json")
    hosts: list[HostState] = []
    limits: dict[str, float] = {}
    for cluster in clusters:
        if not isinstance(cluster, dict):
            continue
        group = str(cluster.get("name", ""))[:200]
        breakers = cluster.get("circuit_breakers")
        thresholds = breakers.get("thresholds") if isinstance(breakers, dict) else None
        for threshold in thresholds if isinstance(thresholds, list) else ():
            if isinstance(threshold, dict) and threshold.get("priority", "DEFAULT") == "DEFAULT":
                for key in ("max_connections", "max_pending_requests", "max_requests", "max_retries"):
                    _add(limits, key, read_float(threshold.get(key), low=0))
        for host in cluster.get("host_statuses") or ():
            if not isinstance(host, dict) or len(hosts) >= MAX_HOSTS:
                continue
            sock = (host.get("address") or {}).get("socket_address") if isinstance(host.get("address"), dict) else None
            address = None
            if isinstance(sock, dict) and sock.get("address"):
                address = f"{sock.get('address')}:{sock.get('port_value', '')}"
            counters: dict[str, float] = {}
            for stat in host.get("stats") or ():
                if isinstance(stat, dict) and isinstance(stat.get("name"), str):
                    value = read_float(stat.get("value", 0), low=0)
                    if value is not None:
                        counters[str(stat["name"])[:64]] = value
            raw_status = host.get("health_status")
            status: Mapping[str, Any] = raw_status if isinstance(raw_status, dict) else {}
            state, flags = _envoy_health(status)
            hostname = host.get("hostname")
            name = str(hostname)[:200] if isinstance(hostname, str) and hostname else (address or "?")
            hosts.append(HostState(name, address, group, state, flags, counters))
    return RouterSnapshot("envoy", source, limits=limits, hosts=tuple(hosts), format="envoy-clusters-json")


def parse_envoy_clusters_text(text: str, source: str = "") -> RouterSnapshot:
    """Envoy's text ``/clusters``: ``cluster::host:port::key::value`` lines."""
    facts: dict[tuple[str, str], dict[str, str]] = {}
    limits: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split("::")
        if len(parts) == 4 and parts[1] == "default_priority":
            _add(limits, parts[2], read_float(parts[3], low=0))
        elif len(parts) == 4 and ":" in parts[1] and len(facts) < MAX_HOSTS:
            facts.setdefault((parts[0][:200], parts[1][:200]), {})[parts[2][:64]] = parts[3][:500]
    hosts = []
    for (group, address), keys in facts.items():
        flags = keys.get("health_flags", "healthy")
        counters = {k: v for k, v in ((k, read_float(v, low=0)) for k, v in keys.items()) if v is not None}
        name = keys.get("hostname") or address
        hosts.append(HostState(name, address, group, _envoy_state(flags), flags, counters))
    return RouterSnapshot("envoy", source, limits=limits, hosts=tuple(hosts), format="envoy-clusters-text")


def haproxy_state(status: str) -> str:
    """A host state (``healthy``, ``failing``, ``down``, ...) from HAProxy's status words (``UP 1/3``, ``DOWN``)."""
    upper = status.upper()
    if upper.startswith("MAINT"):
        return "maint"
    if upper.startswith(("DRAIN", "NOLB")):
        return "draining"
    if upper.startswith("DOWN"):
        return "failing" if "/" in upper else "down"  # "DOWN 1/2": coming back up, not in rotation yet
    if upper.startswith("UP"):
        return "failing" if "/" in upper else "healthy"  # "UP 1/3": failing checks, still in rotation
    if upper.startswith("NO CHECK"):
        return "healthy"
    return "unknown"


def parse_haproxy_csv(text: str, source: str = "") -> RouterSnapshot:
    """HAProxy's stats CSV (``show stat``, ``/;csv``), columns by the header's names."""
    lines = text.splitlines()
    if not lines or not lines[0].lstrip("# ").startswith("pxname"):
        return RouterSnapshot("unknown", source, problem="no HAProxy CSV header", format="csv")
    header = [h.strip() for h in lines[0].lstrip("# ").split(",")]
    values: dict[str, float] = {}
    limits: dict[str, float] = {}
    hosts: list[HostState] = []
    server_5xx = 0.0
    try:
        rows = list(csv.reader(io.StringIO("\n".join(lines[1:]))))
    except csv.Error as exc:
        return RouterSnapshot("haproxy", source, problem=f"bad CSV: {exc}", format="haproxy-csv")
    for cells in rows:
        row = dict(zip(header, cells, strict=False))
        svname = row.get("svname", "")
        pxname = row.get("pxname", "")[:200]
        if svname == "FRONTEND":
            _add(values, "client_requests", read_float(row.get("req_tot"), low=0))
            continue
        if svname == "BACKEND":
            for column, key in HAPROXY_BACKEND.items():
                value = read_float(row.get(column), low=0)
                if key in GAUGES:
                    values[key] = max(values.get(key, 0.0), value or 0.0) if key == "queue_time_ms" else \
                        values.get(key, 0.0) + (value or 0.0)
                else:
                    _add(values, key, value)
            continue
        if not svname or row.get("type") == "3" or len(hosts) >= MAX_HOSTS:
            continue
        status = row.get("status", "")
        counters = {c: v for c in ("econ", "eresp", "wretr", "wredis", "hrsp_5xx", "stot", "chkfail", "chkdown",
                                   "qcur", "qmax", "scur", "lbtot", "cli_abrt", "srv_abrt")
                    if (v := read_float(row.get(c), low=0)) is not None}
        server_5xx += counters.get("hrsp_5xx", 0.0)
        qlimit = read_float(row.get("qlimit"), low=1)
        if qlimit is not None:
            limits["queue_limit"] = max(limits.get("queue_limit", 0.0), qlimit)  # per server: the largest
        address = row.get("addr") or None
        hosts.append(HostState(svname[:200], address[:200] if address else None, pxname, haproxy_state(status),
                               status[:100], counters))
    if "responses_5xx" in values:
        values["server_responses_5xx"] = server_5xx
    total = float(len(hosts))
    values["membership_total"] = total
    values["membership_healthy"] = float(sum(1 for h in hosts if h.state == "healthy"))
    return RouterSnapshot("haproxy", source, values, limits, tuple(hosts), format="haproxy-csv")


def parse_haproxy_servers_state(text: str, source: str = "") -> RouterSnapshot:
    """HAProxy ``show servers state``: server names and addresses (``srv_addr``, ``srv_port``) per backend."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    hosts: list[HostState] = []
    header_line = next((ln for ln in lines if ln.startswith("# be_id")), None)
    if header_line is None:
        return RouterSnapshot("unknown", source, problem="no servers-state header", format="servers-state")
    header = header_line[1:].split()
    for line in lines:
        if line.startswith("#") or line.strip().isdigit():
            continue
        row = dict(zip(header, line.split(), strict=False))
        op = row.get("srv_op_state")
        state = {"0": "down", "1": "failing", "2": "healthy", "3": "failing"}.get(op or "", "unknown")
        if row.get("srv_admin_state", "0") not in ("0", ""):
            state = "maint"
        port = row.get("srv_port")
        address = f"{row.get('srv_addr')}:{port}" if row.get("srv_addr") and port else None
        if row.get("srv_name") and len(hosts) < MAX_HOSTS:
            hosts.append(HostState(row["srv_name"][:200], address, row.get("be_name", "")[:200], state,
                                   f"op_state {op}"))
    return RouterSnapshot("haproxy", source, hosts=tuple(hosts), format="haproxy-servers-state")


def parse_stub_status(text: str, source: str = "") -> RouterSnapshot:
    """Nginx ``stub_status``: active connections, accepts/handled/requests, reading/writing/waiting."""
    values: dict[str, float] = {}
    lines = [ln.strip() for ln in text.splitlines()]
    for i, line in enumerate(lines):
        if line.startswith("Active connections:"):
            _add(values, "connections_active", read_float(line.partition(":")[2], low=0))
        elif line.startswith("server accepts handled requests") and i + 1 < len(lines):
            numbers = [read_float(v, low=0) for v in lines[i + 1].split()]
            for key, value in zip(("accepts", "handled", "client_requests"), numbers, strict=False):
                _add(values, key, value)
        elif line.startswith("Reading:"):
            words = line.replace(":", " ").split()
            for key in ("Reading", "Writing", "Waiting"):
                if key in words and words.index(key) + 1 < len(words):
                    _add(values, key.lower(), read_float(words[words.index(key) + 1], low=0))
    if not values:
        return RouterSnapshot("unknown", source, problem="not an nginx stub_status answer", format="text")
    return RouterSnapshot("nginx", source, values, format="nginx-stub-status")


def parse_router_prometheus(text: str, source: str = "") -> RouterSnapshot:
    """A router's Prometheus endpoint: Envoy, HAProxy's exporter or Traefik by their names; others kept as is."""
    expo = prometheus.parse(text, prefixes=_ROUTER_PREFIXES)
    names = set(expo.names())
    table: Mapping[str, str]
    if any(n.startswith("envoy_cluster_") for n in names):
        kind, table = "envoy", _ENVOY_BY_PROM
    elif any(n.startswith("haproxy_") for n in names):
        kind, table = "haproxy", HAPROXY_PROM
    elif any(n.startswith("traefik_") for n in names):
        kind, table = "traefik", TRAEFIK_PROM
    elif any(n in NGINX_PROM for n in names) or "nginx_up" in names:
        kind, table = "nginx", NGINX_PROM
    else:
        return RouterSnapshot("prometheus", source, format="prometheus",
                              problem="no known router metric names (Envoy, HAProxy, Traefik, nginx) in the answer")
    values: dict[str, float] = {}
    if kind == "envoy":
        downstream = [x.value for x in expo.get("envoy_http_downstream_rq_total")
                      if x.labels.get("envoy_http_conn_manager_prefix") != "admin"]
        if downstream:
            values["client_requests"] = sum(downstream)
    for name, key in table.items():
        total = expo.total(name)
        if key == "queue_time_ms" and total is not None:
            values[key] = max(s.value for s in expo.get(name)) * 1000.0
        else:
            _add(values, key, total)
    hosts: list[HostState] = []
    if kind == "haproxy":
        for sample in expo.get("haproxy_server_status"):
            if sample.value == 1 and len(hosts) < MAX_HOSTS:
                state = haproxy_state(sample.labels.get("state", ""))
                hosts.append(HostState(sample.labels.get("server", "?")[:200], None,
                                       sample.labels.get("proxy", "")[:200], state, sample.labels.get("state", "")))
        if hosts:
            values["membership_total"] = float(len(hosts))
            values["membership_healthy"] = float(sum(1 for h in hosts if h.state == "healthy"))
    down = kind == "nginx" and any(x.value < 1 for x in expo.get("nginx_up"))
    return RouterSnapshot(kind, source, values, hosts=tuple(hosts), format=f"{kind}-prometheus",
                          problem=f"stopped reading after {prometheus.MAX_SAMPLES} samples" if expo.cut else
                          f"{expo.skipped} lines could not be read" if expo.skipped else
                          "nginx_up 0: the exporter could not read nginx's stub_status" if down else None)


def parse_router_stats(body: bytes | str, source: str = "", content_type: str | None = None) -> RouterSnapshot:
    """Any router's statistics answer (or a saved dump of one), the kind detected from its content; never raises.

    For ``infradoctor logs`` and other readers of saved dumps: ``parse_router_stats(Path(f).read_bytes(), f)``.
    """
    raw = body[:MAX_BODY_BYTES]
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    cut = len(body) > MAX_BODY_BYTES
    head = text.lstrip()[:200]
    try:
        if head.startswith("{"):
            try:
                data = load_json(text)
            except ValueError as exc:
                return RouterSnapshot("unknown", source, problem=f"bad JSON: {str(exc)[:200]}", format="json")
            if isinstance(data, dict) and "cluster_statuses" in data:
                snap = parse_envoy_clusters_json(data, source)
            else:
                snap = parse_envoy_stats_json(data, source)
        elif head.startswith("# pxname") or head.startswith("pxname,"):
            snap = parse_haproxy_csv(text, source)
        elif head.startswith("Active connections:"):
            snap = parse_stub_status(text, source)
        elif "# be_id" in text[:2000]:
            snap = parse_haproxy_servers_state(text, source)
        elif "::" in head and head.count("::") >= 2 and not head.startswith("<"):
            snap = parse_envoy_clusters_text(text, source)
        elif prometheus.looks_like(text):
            snap = parse_router_prometheus(text, source)
        else:
            what = "HTML" if head.lower().startswith(("<!doctype", "<html")) else "an unknown format"
            return RouterSnapshot("unknown", source, problem=f"the answer is {what}, not router statistics")
    except (ValueError, TypeError, AttributeError, RecursionError) as exc:
        return RouterSnapshot("unknown", source, problem=f"could not read the answer: {type(exc).__name__}")
    if cut:
        return RouterSnapshot(snap.kind, snap.source, snap.values, snap.limits, snap.hosts, snap.format,
                              f"answer cut at {MAX_BODY_BYTES} bytes")
    return snap
