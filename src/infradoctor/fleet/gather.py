"""Ask Prometheus for the window's evidence and assemble it: GPUs, hosts, containers, routers, model servers.

Every query that fails becomes a :class:`Problem` naming the evidence it would have given; the evidence stays
absent (``None``, or a source marked ``failed`` in its :class:`~infradoctor.fleet.evidence.Coverage`), never
healthy.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from infradoctor.fleet import queries as q
from infradoctor.fleet.evidence import (
    Coverage,
    FleetDisk,
    FleetEvidence,
    FleetGpu,
    FleetHost,
    ModelServer,
    RouterServer,
    RouterUpstream,
    Stat,
    Window,
)
from infradoctor.fleet.prom import Answer, PrometheusClient
from infradoctor.node.containers import ContainerEvidence, ContainerRestart, PodState
from infradoctor.node.gpu.base import CLOCK_EVENT_REASONS

LOOKBACK_S = 6 * 3600.0
"""How far before the window presence is looked up, to tell an exporter that stopped from one never deployed."""
DISKS_PER_NODE = 4
"""Filesystems kept per node (the fullest)."""


@dataclass(frozen=True)
class Problem:
    """A query that gave no (complete) answer, and which evidence it leaves absent."""

    source: str
    """``fleet.<evidence>``, e.g. ``fleet.dcgm.temp_c``."""
    message: str
    """What failed and what is missing."""


@dataclass
class Gathered:
    """What :func:`gather` returns."""

    evidence: FleetEvidence
    """The fleet's evidence."""
    containers: ContainerEvidence | None
    """kube-state-metrics' view (None when it had no series or its queries failed)."""
    problems: list[Problem] = field(default_factory=list)
    """Failed or partial queries."""
    notes: list[str] = field(default_factory=list)
    """Evidence that is absent for a reason other than a failure (an exporter not deployed, a field not collected)."""


class _Asker:
    """Runs queries (several at once), records failures and warnings in the order the queries were listed."""

    def __init__(self, client: PrometheusClient, window: Window, problems: list[Problem], workers: int = 4) -> None:
        self.client = client
        self.window = window
        self.problems = problems
        self.workers = workers

    def instant(self, source: str, expr: str, what: str) -> Answer | None:
        answer = self.client.query(expr, self.window.end)
        return _checked(source, answer, what, self.problems)

    def many(self, jobs: Sequence[tuple[str, str, str]]) -> list[Answer | None]:
        """Instant queries ``(source, expr, what)`` run concurrently; answers in the order given."""
        with ThreadPoolExecutor(max_workers=max(1, self.workers)) as pool:
            answers = list(pool.map(lambda job: self.client.query(job[1], self.window.end), jobs))
        return [_checked(source, answer, what, self.problems) for (source, _, what), answer in zip(jobs, answers,
                                                                                                    strict=True)]

    def range(self, source: str, expr: str, what: str) -> Answer | None:
        answer = self.client.query_range(expr, self.window.start, self.window.end, self.window.step_s)
        return _checked(source, answer, what, self.problems)


def _checked(source: str, answer: Answer, what: str, problems: list[Problem]) -> Answer | None:
    if answer.failure is not None:
        problems.append(Problem(source, f"{answer.failure.kind}: {answer.failure.message}; {what} unknown"))
        return None
    for warning in answer.warnings:
        problems.append(Problem(source, f"partial answer: {warning}; {what} may be incomplete"))
    if answer.truncated:
        problems.append(Problem(source, f"answer cut at {len(answer.series)} series; {what} incomplete"))
    return answer


def _stats_by(answer: Answer | None, keys: tuple[str, ...]) -> dict[tuple[str, ...], dict[str, float]]:
    """``{(key values): {stat: value}}`` from a query with a ``stat`` label."""
    out: dict[tuple[str, ...], dict[str, float]] = defaultdict(dict)
    if answer is None:
        return out
    for series in answer.series:
        value = series.last
        if value is None:
            continue
        key = tuple(series.labels.get(k, "") for k in keys)
        out[key][series.labels.get("stat", "last")] = value
    return out


def _values_by(answer: Answer | None, keys: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = {}
    if answer is None:
        return out
    for series in answer.series:
        if series.last is not None:
            out[tuple(series.labels.get(k, "") for k in keys)] = series.last
    return out


def _stat(values: Mapping[str, float]) -> Stat:
    samples = values.get("samples")
    return Stat(last=values.get("last"), min=values.get("min"), mean=values.get("mean"), max=values.get("max"),
                samples=int(samples) if samples is not None else None)


def gather(client: PrometheusClient, window: Window, scope: q.Scope, *, role_label: str | None = None,
           progress: Callable[[str], None] | None = None, workers: int = 4) -> Gathered:
    """Every source's evidence over the window, with the problems met."""
    problems: list[Problem] = []
    notes: list[str] = []
    ask = _Asker(client, window, problems, workers)
    say = progress or (lambda text: None)
    gpu_key = (q.NODE, "gpu")

    say("which metrics exist")
    # One look-up of the names with series: signals an exporter does not export are not asked for (and stay
    # "not collected"); where the API is not served (some proxies), every name is asked for.
    match = "{" + ",".join(m for m in (q.EXPORTED, scope.matchers) if m) + "}"
    present, _ = client.metric_names(match, window.start - LOOKBACK_S, window.end)
    scope = replace(scope, present=present)

    say("dcgm-exporter")
    sources: tuple[tuple[str, tuple[str, ...]], ...] = (("dcgm-exporter", q.GPU_PRESENCE),
                                                         ("node_exporter", ("node_load1", "node_cpu_seconds_total")))
    jobs = []
    for source, metrics in sources:
        if scope.has(metrics):
            jobs.append((f"fleet.{source}", q.presence_query(scope, metrics), f"which nodes {source} covered"))
            jobs.append((f"fleet.{source}", q.earlier_presence_query(scope, metrics, LOOKBACK_S, window.seconds),
                         f"which nodes {source} covered before the window"))
    answers = iter(ask.many(jobs))
    seen: dict[str, dict[str, float]] = {}
    before: dict[str, set[str]] = {}
    failed: set[str] = set()
    for source, metrics in sources:
        if not scope.has(metrics):
            seen[source], before[source] = {}, set()
            continue
        now, earlier = next(answers), next(answers)
        if now is None:
            failed.add(source)
        seen[source] = {k[0]: v for k, v in _values_by(now, (q.NODE,)).items() if k[0]}
        before[source] = {k[0] for k in _values_by(earlier, (q.NODE,)) if k[0]}

    gpu_stats: dict[tuple[str, ...], dict[str, Stat]] = defaultdict(dict)
    gpu_failed: list[str] = []
    names: dict[tuple[str, ...], dict[str, str]] = {}
    shares: dict[tuple[str, ...], float] = {}
    if "dcgm-exporter" not in failed and seen["dcgm-exporter"]:
        signals = [s for s in q.GPU_SIGNALS if scope.has(s.metrics)]
        jobs = [(f"fleet.dcgm.{s.name}", q.gauge_query(scope, s, f"{q.NODE}, gpu"), f"GPU {s.name}") for s in signals]
        jobs.append(("fleet.dcgm.identity", q.gpu_identity_query(scope), "GPU UUIDs and models"))
        *stat_answers, identity = ask.many(jobs)
        for signal, answer in zip(signals, stat_answers, strict=True):
            if answer is None:
                gpu_failed.append(signal.name)
            for key, values in _stats_by(answer, gpu_key).items():
                gpu_stats[key][signal.name] = _stat(values)
        for series in identity.series if identity is not None else ():
            key = tuple(series.labels.get(k, "") for k in gpu_key)
            names.setdefault(key, {}).update({k: v for k, v in series.labels.items() if v})
        if scope.has(q.CLOCK_REASONS):
            shares, by_reason = _throttled_shares(ask, scope, window, gpu_stats, notes)
    gpus = []
    for key in sorted(set(gpu_stats) | set(names), key=_natural):
        node, gpu = key
        if not node or not gpu:  # series without a gpu label (a fixture's dummy lines) name no GPU
            continue
        labels = names.get(key, {})
        gpus.append(FleetGpu(node=node, gpu=gpu, uuid=labels.get("UUID") or labels.get("uuid"),
                             model=labels.get("modelName"), pci_bus_id=labels.get("pci_bus_id"),
                             signals=dict(gpu_stats.get(key, {})),
                             throttled_share=shares.get(key), reason_share=by_reason.get(key, {}),
                             unknown=tuple(gpu_failed)))

    say("node_exporter")
    hosts = _hosts(ask, scope, seen["node_exporter"]) if "node_exporter" not in failed else []

    say("kube-state-metrics")
    containers = _containers(ask, scope, window, client.base, notes)

    say("routers and model servers")
    routers = _routers(ask, scope)
    servers = _servers(ask, scope)

    roles: dict[str, str] = {}
    if role_label:
        inner = f"last_over_time({scope.select(q.GPU_PRESENCE + ('node_load1',))}[{scope.window}])"
        answer = ask.instant("fleet.roles", f"count by ({q.NODE}, {role_label}) ({scope.keyed(inner)})",
                             f"the {role_label} of each node")
        for series in answer.series if answer is not None else ():
            node, role = series.labels.get(q.NODE, ""), series.labels.get(role_label, "")
            if node and role:
                roles[node] = role

    every_node = sorted(set().union(*(set(v) for v in seen.values()), {r.node for r in routers},
                                    {s.node for s in servers}, *before.values()), key=_natural_one)
    coverage = (
        Coverage("dcgm-exporter", tuple(sorted(seen["dcgm-exporter"], key=_natural_one)),
                 tuple(sorted(set(seen["dcgm-exporter"]) | before["dcgm-exporter"], key=_natural_one)),
                 failed="dcgm-exporter" in failed),
        Coverage("node_exporter", tuple(sorted(seen["node_exporter"], key=_natural_one)), tuple(every_node),
                 failed="node_exporter" in failed),
    )
    evidence = FleetEvidence(window=window, gpus=tuple(gpus), hosts=tuple(hosts), routers=tuple(routers),
                             servers=tuple(servers), coverage=coverage, role_label=role_label, roles=roles)
    return Gathered(evidence, containers, problems, notes)


MAX_THROTTLE_CANDIDATES = 400
"""GPUs whose reason mask is followed over time at most (the rest keep no throttled share, with a note)."""
NODES_PER_RANGE_QUERY = 50
"""Nodes per range query of the reason mask (bounds each answer)."""


def _throttled_shares(
    ask: _Asker, scope: q.Scope, window: Window, gpu_stats: Mapping[tuple[str, ...], Mapping[str, Stat]],
    notes: list[str],
) -> tuple[dict[tuple[str, ...], float], dict[tuple[str, ...], dict[str, float]]]:
    """Per GPU, the share of the window's steps with a fault reason bit set, and the share per reason.

    GPUs whose mask stayed below 4 had none (0.0); the others' masks are read over time in bounded range queries.
    The power cap (0x4) is counted per reason only: whether it cost the work anything is N003's judgement (a GPU
    at idle or below half its power limit is not throttled by it).
    """
    gpu_key = (q.NODE, "gpu")
    candidates = ask.instant("fleet.dcgm.throttle", q.throttle_candidates_query(scope), "which GPUs were throttled")
    if candidates is None:
        return {}, {}
    shares = {key: 0.0 for key, stats in gpu_stats.items() if "clock_reasons" in stats}
    by_reason: dict[tuple[str, ...], dict[str, float]] = {}
    keys = sorted({tuple(s.labels.get(k, "") for k in gpu_key) for s in candidates.series}, key=_natural)
    if len(keys) > MAX_THROTTLE_CANDIDATES:
        notes.append(f"{len(keys)} GPUs had throttle reasons set; the share of time throttled is computed for "
                     f"the first {MAX_THROTTLE_CANDIDATES} only")
        for key in keys[MAX_THROTTLE_CANDIDATES:]:
            shares.pop(key, None)
        keys = keys[:MAX_THROTTLE_CANDIDATES]
    wanted = set(keys)
    nodes = sorted({k[0] for k in keys}, key=_natural_one)
    fault = sum(q.FAULT_BITS) & ~0x4
    reasons = [r for r in CLOCK_EVENT_REASONS if r.bit in q.FAULT_BITS]
    for i in range(0, len(nodes), NODES_PER_RANGE_QUERY):
        batch = nodes[i:i + NODES_PER_RANGE_QUERY]
        answer = ask.range("fleet.dcgm.throttle", q.reasons_range_query(scope, batch), "the time GPUs were throttled")
        if answer is None:
            for key in keys:
                if key[0] in batch:
                    shares.pop(key, None)
            continue
        for series in answer.series:
            key = tuple(series.labels.get(k, "") for k in gpu_key)
            if key in wanted and series.points:
                masks = [int(v) for _, v in series.points]
                shares[key] = sum(1 for m in masks if m & fault) / len(masks)
                by_reason[key] = {r.name: round(sum(1 for m in masks if m & r.bit) / len(masks), 4)
                                  for r in reasons if any(m & r.bit for m in masks)}
    return shares, by_reason


def _natural(key: tuple[str, ...]) -> tuple[object, ...]:
    return tuple(_natural_one(part) for part in key)


def _natural_one(text: str) -> tuple[object, ...]:
    """``node-2`` before ``node-10``."""
    out: list[object] = []
    digits = ""
    word = ""
    for ch in text:
        if ch.isdigit():
            if word:
                out.append(word)
                word = ""
            digits += ch
        else:
            if digits:
                out.append(int(digits) if len(digits) < 19 else digits)
                digits = ""
            word += ch
    if digits:
        out.append(int(digits) if len(digits) < 19 else digits)
    if word:
        out.append(word)
    return tuple((0, p) if isinstance(p, int) else (1, p) for p in out)


def _hosts(ask: _Asker, scope: q.Scope, nodes_seen: Mapping[str, float]) -> list[FleetHost]:
    key = (q.NODE,)
    stats: dict[str, dict[str, Stat]] = defaultdict(dict)
    failed: list[str] = []
    signals = [s for s in q.HOST_SIGNALS if scope.has(s.metrics)]
    cpu = list(q.cpu_queries(scope).items()) if scope.has(("node_cpu_seconds_total",)) else []
    jobs = [(f"fleet.node_exporter.{s.name}", q.gauge_query(scope, s, q.NODE), f"host {s.name}") for s in signals]
    jobs += [(f"fleet.node_exporter.{name.partition('.')[0]}", expr, f"host {name.partition('.')[0]}")
             for name, expr in cpu]
    has_fs = scope.has(("node_filesystem_size_bytes",))
    if has_fs:
        jobs.append(("fleet.node_exporter.filesystems", q.filesystem_query(scope), "disk space"))
    answers = ask.many(jobs)
    for signal, answer in zip(signals, answers, strict=False):
        if answer is None:
            failed.append(signal.name)
        for (node,), values in _stats_by(answer, key).items():
            stats[node][signal.name] = _stat(values)
    for (name, _), answer in zip(cpu, answers[len(signals):], strict=False):
        cpu_signal, _, stat = name.partition(".")
        if answer is None:
            failed.append(cpu_signal)
        for (node,), value in _values_by(answer, key).items():
            previous = stats[node].get(cpu_signal, Stat())
            stats[node][cpu_signal] = replace(previous, last=value) if stat == "last" else replace(previous, mean=value)
    answer = answers[-1] if has_fs else None
    if has_fs and answer is None:
        failed.append("filesystems")
    disks: dict[str, list[FleetDisk]] = defaultdict(list)
    fs_key = (q.NODE, "mountpoint", "device", "fstype")
    for (node, mountpoint, device, fstype), values in _stats_by(answer, fs_key).items():
        size = values.get("size")
        if not size or "avail_min" not in values or "free_min" not in values:
            continue
        disks[node].append(FleetDisk(mountpoint, device, fstype, size, values["avail_min"], values["free_min"],
                                     values.get("files"), values.get("files_free")))
    out = []
    for node in sorted(set(stats) | set(nodes_seen), key=_natural_one):
        if not node:
            continue
        fullest = sorted(disks.get(node, ()), key=lambda d: -(1 - d.avail_bytes_min / d.size_bytes))
        out.append(FleetHost(node, dict(stats.get(node, {})), tuple(fullest[:DISKS_PER_NODE]), tuple(failed)))
    return out


def _containers(ask: _Asker, scope: q.Scope, window: Window, base: str, notes: list[str]) -> ContainerEvidence | None:
    if not scope.has(("kube_pod_info", "kube_pod_status_phase")):
        notes.append("no kube-state-metrics series: container restarts and pod states not checked")
        return None
    queries = q.kube_queries(scope)
    present = ask.instant("fleet.kube-state-metrics", queries["present"], "whether kube-state-metrics is scraped")
    if present is None:
        return None
    if not present.series or not (present.series[0].last or 0) > 0:
        notes.append("no kube-state-metrics series: container restarts and pod states not checked")
        return None
    ctr = ("namespace", "pod", "container")
    what = "container restarts"
    restarts = _values_by(ask.instant("fleet.kube.restarts", queries["restarts"], what), ctr)
    terminated: dict[tuple[str, ...], str] = {}
    answer = ask.instant("fleet.kube.terminated", queries["terminated"], "why containers stopped")
    for series in answer.series if answer is not None else ():
        terminated[tuple(series.labels.get(k, "") for k in ctr)] = series.labels.get("reason", "")
    waiting: dict[tuple[str, ...], str] = {}
    answer = ask.instant("fleet.kube.waiting", queries["waiting"], "containers waiting to start")
    for series in answer.series if answer is not None else ():
        waiting[tuple(series.labels.get(k, "") for k in ctr)] = series.labels.get("reason", "")
    exit_codes = _values_by(ask.instant("fleet.kube.exit_code", queries["exit_code"], "exit codes"), ctr)
    pod_node: dict[tuple[str, str], str] = {}
    answer = ask.instant("fleet.kube.pod_node", queries["pod_node"], "which node each pod runs on")
    for series in answer.series if answer is not None else ():
        pod_node[(series.labels.get("namespace", ""), series.labels.get("pod", ""))] = series.labels.get("node", "")
    items = []
    for key in sorted(set(restarts) | set(waiting) | {k for k in terminated if k in restarts}):
        namespace, pod, container = key
        code = exit_codes.get(key)
        items.append(ContainerRestart(namespace, pod, container, pod_node.get((namespace, pod)) or None,
                                      round(restarts.get(key, 0.0), 2), terminated.get(key) or None,
                                      waiting.get(key) or None, int(code) if code is not None else None))
    items.sort(key=lambda c: (-c.restarts, c.name))

    def pods(name: str, what: str) -> tuple[PodState, ...]:
        found = ask.instant(f"fleet.kube.{name}", queries[name], what)
        return tuple(PodState(s.labels.get("namespace", ""), s.labels.get("pod", ""),
                              pod_node.get((s.labels.get("namespace", ""), s.labels.get("pod", ""))) or None,
                              s.last if name == "pending_gpu" else None)
                     for s in (found.series if found is not None else ()))

    return ContainerEvidence(
        source=f"kube-state-metrics via {base}", window_s=window.seconds, restarts=tuple(items[:q.RESTART_LIMIT]),
        not_ready=pods("not_ready", "pods not ready"), pending_gpu_pods=pods("pending_gpu", "pending GPU pods"),
        cut=len(items) >= q.RESTART_LIMIT)


_NAME_IN_QUERY = re.compile(r'__name__=~?"([^"]+)"')


def _asks_present(scope: q.Scope, expr: str) -> bool:
    """Whether a query names a metric with series (always, when which have series is not known)."""
    if scope.present is None:
        return True
    return any(name in scope.present for found in _NAME_IN_QUERY.findall(expr) for name in found.split("|"))


_UPSTREAM_LABEL = {"envoy": "envoy_cluster_name", "haproxy": "proxy"}
"""The label naming a router's upstream (nginx has none: its row is the whole server, upstream ``-``)."""


def _routers(ask: _Asker, scope: q.Scope) -> list[RouterUpstream]:
    fields: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    wanted = [(name, expr) for name, expr in q.router_queries(scope).items() if _asks_present(scope, expr)]
    hosts = [(name, expr) for name, expr in q.router_server_queries(scope).items() if _asks_present(scope, expr)]
    answers = ask.many([(f"fleet.router.{n.partition('.')[0]}", e, n.replace(".", " ")) for n, e in wanted]
                       + [("fleet.router.haproxy", e, f"HAProxy servers' {n}") for n, e in hosts])
    for (name, _), answer in zip(wanted, answers, strict=False):
        router, _, what = name.partition(".")
        label = _UPSTREAM_LABEL.get(router)
        for series in answer.series if answer is not None else ():
            node = series.labels.get(q.NODE, "")
            upstream = series.labels.get(label, "") if label else "-"
            if node and upstream and series.last is not None:
                fields[(node, router, upstream)][what] = series.last
    states: dict[tuple[str, str, str], str] = {}
    counters: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    for (name, _), answer in zip(hosts, answers[len(wanted):], strict=True):
        for series in answer.series if answer is not None else ():
            key = (series.labels.get(q.NODE, ""), series.labels.get("proxy", ""), series.labels.get("server", ""))
            if not all(key) or series.last is None:
                continue
            if name == "state":
                state = series.labels.get("state", "")
                if _SERVER_STATE_RANK.get(state, 1) >= _SERVER_STATE_RANK.get(states.get(key, "UP"), 0):
                    states[key] = state
            else:
                counters[key][name] = series.last
    servers: dict[tuple[str, str], list[RouterServer]] = defaultdict(list)
    for key in sorted(set(states) | set(counters), key=_natural):
        node, proxy, server = key
        servers[(node, proxy)].append(RouterServer(server, states.get(key, "UP"), dict(counters.get(key, {}))))
        fields.setdefault((node, "haproxy", proxy), {})
    return [RouterUpstream(node, router, upstream, **values,
                           servers=tuple(servers.get((node, upstream), ())) if router == "haproxy" else ())
            for (node, router, upstream), values in sorted(fields.items(), key=lambda kv: _natural(kv[0]))]


_SERVER_STATE_RANK = {"UP": 0, "NOLB": 1, "DRAIN": 1, "MAINT": 2, "DOWN": 3}
"""Which of an HAProxy server's states in the window is kept: the worst."""


def _servers(ask: _Asker, scope: q.Scope) -> list[ModelServer]:
    fields: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    wanted = [(name, expr) for name, expr in q.server_queries(scope).items() if _asks_present(scope, expr)]
    answers = ask.many([(f"fleet.server.{n.partition('.')[0]}", e, n.replace(".", " ")) for n, e in wanted])
    for (name, _), answer in zip(wanted, answers, strict=True):
        server, _, what = name.partition(".")
        label = {"vllm": "model_name", "triton": "model"}.get(server)
        for series in answer.series if answer is not None else ():
            node = series.labels.get(q.NODE, "")
            model = series.labels.get(label, "-") if label else "-"
            if node and series.last is not None:
                fields[(node, server, model)][what] = series.last
    return [ModelServer(node, server, model, **values)
            for (node, server, model), values in sorted(fields.items(), key=lambda kv: _natural(kv[0]))]
