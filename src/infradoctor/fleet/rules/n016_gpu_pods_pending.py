"""N016 gpu-pods-pending: pods that request GPUs stayed Pending: the cluster could not place them.

What it detects:
    From kube-state-metrics (`infradoctor fleet`): pods with an ``nvidia.com/gpu`` request whose phase was
    ``Pending`` for at least 5 minutes of the incident window (half of a shorter window). One finding for the
    fleet, naming the pods and the GPUs they wait for.

Why it matters:
    A pod that requests GPUs and stays Pending is capacity the service was meant to have and does not: a scale-up
    that did not happen, or a replacement for a crashed replica that cannot start. The replicas that run take its
    traffic, so queues and latency grow on them while nothing on those nodes looks wrong. Usual causes: no node
    has that many free GPUs (fragmentation: free GPUs spread over several nodes), a node's GPUs are not advertised
    (the NVIDIA device plugin is down or the GPU fell off the bus: see N001 and N012 on that node), taints and
    node selectors that match no GPU node, or a quota.

How it is measured:
    The steps of the window (a subquery at the window's step) at which ``kube_pod_status_phase{phase="Pending"}``
    was 1, times the step, is the time a pod was Pending; pods with at least ``POD_STATE_MIN_S`` of it (or half a
    shorter window) and a positive
    ``kube_pod_container_resource_requests{resource="nvidia_com_gpu"}`` count (at most 100 pods are read).
    Severity ``medium`` (work waits, nothing running fails); ``high`` when the pods wait for at least
    ``HIGH_GPUS`` GPUs.

Fix:
    ``kubectl describe pod`` shows the scheduler's reason (``Insufficient nvidia.com/gpu``, taints, affinity).
    Compare the GPUs requested with the free GPUs per node (``kubectl describe node``: Allocatable minus
    Allocated); restart the device plugin on a node that advertises fewer GPUs than it has; pack GPU pods (bin
    packing, or a request per pod that divides the GPUs per node) or add GPU nodes.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Location, Rule, Severity
from infradoctor.fleet.queries import POD_STATE_MIN_S
from infradoctor.node.containers import ContainerEvidence
from infradoctor.node.rules._common import NodeOptions

RULE = Rule(
    "N016",
    "gpu-pods-pending",
    Severity.MEDIUM,
    "Pods requesting GPUs stayed Pending",
    fix="`kubectl describe pod` for the scheduler's reason; compare requested with free GPUs per node; restart the "
        "device plugin where GPUs are not advertised; pack GPU pods or add GPU nodes.",
    risk="Packing GPU pods tighter puts more replicas behind one node's failure.",
    commands=("fleet",),
)

HIGH_GPUS = 8
"""GPUs waited for (summed over the pending pods) from which the finding is high: a whole node's worth."""
SHOWN = 10
"""Pods named in the finding."""

__all__ = ["POD_STATE_MIN_S", "RULE", "check"]


@RULE.check(ContainerEvidence, NodeOptions)
def check(evidence: ContainerEvidence, options: NodeOptions) -> list[Finding]:
    """One finding with every GPU pod that stayed Pending."""
    pods = evidence.pending_gpu_pods
    if not pods:
        return []
    gpus = sum(p.gpus_requested or 0.0 for p in pods)
    high = options.threshold(RULE.code, "HIGH_GPUS", HIGH_GPUS)
    names = [f"{p.namespace}/{p.pod}" + (f" ({p.gpus_requested:g} GPU)" if p.gpus_requested else "") for p in pods]
    return [RULE.finding(
        f"{len(pods)} pod{'s' if len(pods) != 1 else ''} requesting {gpus:g} GPUs stayed Pending: "
        + ", ".join(names[:3]) + (" ..." if len(names) > 3 else ""),
        {"pods": names[:SHOWN], "pending_pods": len(pods), "gpus_requested": gpus,
         "nodes": sorted({p.node for p in pods if p.node}), "window_s": evidence.window_s, "source": evidence.source},
        severity=Severity.HIGH if gpus >= high else None,
        location=Location(file="(unscheduled)"),
    )]
