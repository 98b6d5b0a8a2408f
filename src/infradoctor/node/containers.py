"""Kubernetes' view of the containers of a set of nodes (kube-state-metrics): restarts and why they stopped.

Evidence for N014 container-restarts. ``infradoctor fleet`` builds it from kube-state-metrics series over the
incident window; other sources (the kubelet's events in logs) may build it too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ContainerRestart:
    """One container that restarted, or is failing to start, in the window."""

    namespace: str
    """Pod namespace."""
    pod: str
    """Pod name."""
    container: str
    """Container name."""
    node: str | None
    """Node the pod runs on (``kube_pod_info``), when known."""
    restarts: float
    """Restarts in the window (increase of ``kube_pod_container_status_restarts_total``)."""
    last_terminated_reason: str | None = None
    """Why it last stopped (``OOMKilled``, ``Error``, ``DeadlineExceeded`` ...), when reported in the window."""
    waiting_reason: str | None = None
    """Why it is waiting (``CrashLoopBackOff``, ``ImagePullBackOff`` ...), when reported in the window."""
    exit_code: int | None = None
    """Last termination's exit code (137 after an OOM kill), when reported."""

    @property
    def name(self) -> str:
        """``namespace/pod/container``."""
        return f"{self.namespace}/{self.pod}/{self.container}"


@dataclass(frozen=True)
class PodState:
    """A pod not ready or pending in the window."""

    namespace: str
    """Pod namespace."""
    pod: str
    """Pod name."""
    node: str | None
    """Node, when scheduled."""
    gpus_requested: float | None = None
    """GPUs requested (``nvidia_com_gpu``), when any."""


@dataclass(frozen=True)
class ContainerEvidence:
    """Restarts and pod states over a window, as kube-state-metrics reported them."""

    source: str
    """Where it came from, e.g. ``kube-state-metrics via http://prometheus:9090``."""
    window_s: float
    """Length of the window the counts cover."""
    restarts: tuple[ContainerRestart, ...]
    """Containers that restarted or wait in a back-off, most restarts first (bounded)."""
    not_ready: tuple[PodState, ...] = ()
    """Pods that were not ready at some point in the window (bounded)."""
    pending_gpu_pods: tuple[PodState, ...] = ()
    """Pods requesting GPUs that were Pending in the window (bounded)."""
    cut: bool = False
    """More containers restarted than were kept."""
