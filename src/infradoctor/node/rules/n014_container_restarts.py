"""N014 container-restarts: containers that restart, are OOM-killed or wait in a crash back-off.

What it detects:
    Containers that do not stay up. From kube-state-metrics (``infradoctor fleet``): per node, the containers whose
    restart count grew in the incident window by at least ``MIN_RESTARTS``, or whose last termination in the window
    was ``OOMKilled``, or that waited in ``CrashLoopBackOff`` (or another start failure: image pull, bad
    configuration), and the pods that were not ready (failing their readiness probe) for a while in the window. One
    finding per node, naming the containers with the most restarts and the pods not ready. From logs
    (``infradoctor logs``): Kubernetes events, ``kubectl describe``/``get pods`` output and kubelet lines about a
    container that does not stay up: ``CrashLoopBackOff`` / "back-off restarting failed container", a container
    ``OOMKilled``, and failed or errored liveness, readiness and startup probes ("Readiness probe failed", kubelet's
    "Probe failed", "failed liveness probe, will be restarted").

Why it matters:
    A restarting model server drops its in-flight requests, reloads its weights (minutes for a large model) and
    sheds its warm KV cache; behind a router this shows as 5xx bursts, retries, "no healthy upstream" and latency
    spikes on whichever node it runs. An OOM kill (exit code 137) means the container's memory limit is below what
    the model or its batch needs; a crash back-off means it cannot start at all and its GPUs sit idle; a server that
    fails readiness is taken out of the load balancer, so the others take its traffic.

How it is measured:
    ``increase(kube_pod_container_status_restarts_total[window])`` per container,
    ``kube_pod_container_status_last_terminated_reason`` and ``..._waiting_reason`` seen in the window, and
    ``kube_pod_info`` for the node. Severity: ``high`` for an OOM kill, a crash back-off, or at least
    ``HIGH_RESTARTS`` restarts of one container; else ``medium``. Pods not ready: ``kube_pod_status_ready``
    with ``condition="false"`` for at least 5 minutes of the window (half of a shorter one; a model server is not
    ready while it loads its weights); alone they make the finding ``low`` (out of the load balancer, the others
    take its traffic), as readiness probe failures in logs do.

    From logs (`infradoctor logs`): the signature catalog's ``crash_loop_backoff``, ``container_oom_killed`` and
    ``probe_failed`` lines merged into incidents per source and time window. ``high`` for an OOM kill or a crash
    back-off (as from kube-state-metrics); probe failures alone are ``low`` (a probe failing under load is worth
    knowing, not yet a restart).

Evidence:
    Every check gives:

    - ``source``: ``prometheus`` (kube-state-metrics, ``infradoctor fleet``) or ``logs``.
    - ``oom_kills``: OOM kills seen (from kube-state-metrics: containers whose last termination in the window
      was ``OOMKilled``; from logs: ``OOMKilled`` lines).
    - ``crash_loops``: crash back-offs seen (containers waiting in a start failure; from logs:
      ``CrashLoopBackOff`` lines).

    From kube-state-metrics also: ``node``, ``containers``, ``restarts``, ``oom_killed`` and ``crash_looping`` (the
    containers named), ``top`` (the most restarted, with their reasons and exit codes), ``not_ready``,
    ``pods_not_ready``, ``window_s``, ``source_detail`` (the query's origin).

    From logs also: the incidents' summary: ``kinds`` (lines per signature, probe failures included), ``count``,
    ``failures``, ``incidents``, ``files``, ``subjects``, ``first``, ``last``, ``windows``, ``example``.

Fix:
    OOMKilled: raise the container's memory limit to what it uses at peak (or lower its batch size / KV-cache
    share); CrashLoopBackOff: read the previous container's log (``kubectl logs --previous``) for the start-up
    error; repeated restarts without a reason: check liveness probes (a probe that times out under load kills a
    healthy but busy server); make probes answer what the server can answer while busy (a cheap health endpoint, a
    timeout above its p99, a startupProbe as long as the model takes to load).
"""

from __future__ import annotations

from collections import defaultdict

from infradoctor.findings import Finding, Location, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.incidents import LogsRuleOptions, signature_findings
from infradoctor.node.containers import ContainerEvidence, ContainerRestart, PodState
from infradoctor.node.rules._common import NodeOptions

RULE = Rule(
    "N014",
    "container-restarts",
    Severity.MEDIUM,
    "Containers restart, are OOM-killed or crash-loop",
    fix="OOMKilled: raise the memory limit or lower the batch; CrashLoopBackOff: read `kubectl logs --previous`; "
        "frequent restarts: check liveness probe timeouts under load.",
    risk="Higher limits fit fewer pods per node; longer probe timeouts detect real hangs later.",
    commands=("fleet", "logs"),
)

MIN_RESTARTS = 1
"""Restarts of one container in the window from which it counts."""
HIGH_RESTARTS = 5
"""Restarts of one container in the window that make the finding high."""
FAILING_WAIT_REASONS = frozenset({"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull",
                                  "CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
"""Waiting reasons that mean the container cannot start (``ContainerCreating`` is normal)."""
SHOWN = 5
"""Containers named per finding."""


def _counts(item: ContainerRestart, minimum: float) -> bool:
    return (item.restarts >= minimum or item.last_terminated_reason == "OOMKilled"
            or item.waiting_reason in FAILING_WAIT_REASONS)


@RULE.check(ContainerEvidence, NodeOptions)
def check(evidence: ContainerEvidence, options: NodeOptions) -> list[Finding]:
    """One finding per node with restarting, OOM-killed or crash-looping containers, or pods not ready."""
    minimum = options.threshold(RULE.code, "MIN_RESTARTS", MIN_RESTARTS)
    high = options.threshold(RULE.code, "HIGH_RESTARTS", HIGH_RESTARTS)
    by_node: dict[str, list[ContainerRestart]] = defaultdict(list)
    for item in evidence.restarts:
        if _counts(item, minimum):
            by_node[item.node or "(node unknown)"].append(item)
    unready: dict[str, list[PodState]] = defaultdict(list)
    for pod in evidence.not_ready:
        unready[pod.node or "(node unknown)"].append(pod)
    findings = []
    for node in sorted(set(by_node) | set(unready)):
        items = sorted(by_node.get(node, ()), key=lambda c: (-c.restarts, c.name))
        pods = unready.get(node, [])
        oom = [c for c in items if c.last_terminated_reason == "OOMKilled"]
        looping = [c for c in items if c.waiting_reason in FAILING_WAIT_REASONS]
        total = sum(c.restarts for c in items)
        parts = [f"{len(items)} container{'s' if len(items) != 1 else ''} restarted {total:.0f} times"] if items else []
        if oom:
            parts.append(f"{len(oom)} OOMKilled")
        if looping:
            parts.append(f"{len(looping)} in {looping[0].waiting_reason}")
        if pods:
            parts.append(f"{len(pods)} pod{'s' if len(pods) != 1 else ''} not ready")
        shown = ", ".join([f"{c.name} x{c.restarts:.0f}" for c in items[:3]]
                          + [f"{p.namespace}/{p.pod} not ready" for p in pods[:3 if not items else 1]])
        severe = bool(oom or looping) or any(c.restarts >= high for c in items)
        findings.append(RULE.finding(
            f"{node}: " + ", ".join(parts) + f" ({shown})",
            {
                "source": "prometheus",
                "oom_kills": len(oom),
                "crash_loops": len(looping),
                "node": node,
                "containers": len(items),
                "restarts": total,
                "oom_killed": [c.name for c in oom[:SHOWN]],
                "crash_looping": [c.name for c in looping[:SHOWN]],
                "top": [{"container": c.name, "restarts": c.restarts, "last_terminated_reason":
                         c.last_terminated_reason, "waiting_reason": c.waiting_reason, "exit_code": c.exit_code}
                        for c in items[:SHOWN]],
                "not_ready": [f"{p.namespace}/{p.pod}" for p in pods[:SHOWN]],
                "pods_not_ready": len(pods),
                "window_s": evidence.window_s,
                "source_detail": evidence.source,
            },
            severity=Severity.HIGH if severe else None if items else Severity.LOW,
            location=Location(file=node),
        ))
    return findings


LOGS_RESTART_SIGNATURES = ("crash_loop_backoff", "container_oom_killed")
"""Log signatures that mean a container restarted or cannot start: high."""
LOGS_SIGNATURES = (*LOGS_RESTART_SIGNATURES, "probe_failed")
"""The log signatures of this code."""


@RULE.check(LogsEvidence, LogsRuleOptions)
def check_logs(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """One finding with every restart and probe failure in the logs; high with an OOM kill or a crash back-off."""
    incidents = evidence.incidents_of(*LOGS_SIGNATURES)
    if not incidents:
        return []
    restarts = any(i.signature in LOGS_RESTART_SIGNATURES for i in incidents)
    what = {"crash_loop_backoff": "CrashLoopBackOff", "container_oom_killed": "OOMKilled",
            "probe_failed": "probe failures"}
    kinds = [what[s] for s in LOGS_SIGNATURES if evidence.signature_counts.get(s)]
    counts = evidence.signature_counts
    return signature_findings(evidence, RULE, LOGS_SIGNATURES, "Container restarts (" + ", ".join(kinds) + ")",
                              severity=Severity.HIGH if restarts else Severity.LOW,
                              extra={"oom_kills": counts.get("container_oom_killed", 0),
                                     "crash_loops": counts.get("crash_loop_backoff", 0)})
