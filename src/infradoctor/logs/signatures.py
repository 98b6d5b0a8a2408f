"""The failure-signature catalog: what a log line means, which finding it maps to, and the fix.

Signatures are found two ways. Access-log lines carry structured fields (Envoy ``%RESPONSE_FLAGS%``, HAProxy's
termination state, nginx's status and ``$upstream_addr``), classified by :func:`envoy_signature`,
:func:`haproxy_signature` and :func:`nginx_signature`. Free-text lines (nginx error log, app logs, tracebacks,
kernel log) are matched against the text patterns of :data:`SIGNATURES` in one combined regular expression
(:func:`match_text`), first match in catalog order wins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class Signature:
    """One failure signature."""

    id: str
    """Stable id used in results, e.g. ``upstream_timeout``."""
    code: str | None
    """Finding code it maps to (``R008``), or None for signatures that are counted but not findings."""
    meaning: str
    """What the router or program was doing when it wrote this."""
    fix: str
    """What to change."""
    patterns: tuple[str, ...] = ()
    """Regular expressions matched against free-text lines (case-sensitive unless scoped ``(?i:...)``)."""


SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "no_healthy_upstream", "R006",
        "The router had no healthy backend to send the request to (all failed health checks or were ejected).",
        "Find why backends fail health checks (crashing, still loading the model, probe too strict); gate "
        "readiness on the model being loaded; check Envoy's panic threshold and outlier ejection.",
        (r"no healthy upstream", r"no live upstreams", r"has no server available", r"<NOSRV>"),
    ),
    Signature(
        "socket_exhaustion", "N009",
        "No local port or socket could be allocated for a new connection.",
        "Reuse connections (keep-alive pools), widen net.ipv4.ip_local_port_range, raise the fd limit.",
        (r"Cannot assign requested address", r"\bEADDRNOTAVAIL\b", r"Too many open files", r"\bEMFILE\b"),
    ),
    Signature(
        "upstream_reset", "R007",
        "The upstream closed or reset the connection before a complete response (crash, keep-alive race, "
        "worker killed).",
        "Check the backend's logs for crashes/OOM kills at these times; make the backend's keep-alive timeout "
        "longer than the router's; retry idempotent requests on reset.",
        (r"upstream prematurely closed connection", r"reset reason: connection termination",
         r"(?i:connection reset by peer)", r"\bECONNRESET\b", r"recv\(\) failed \(104"),
    ),
    Signature(
        "upstream_connect_error", "R007",
        "The router could not open a connection to the upstream (nothing listening, refused, unreachable).",
        "Check that the backend is up and listening on the address the router uses; remove dead backends from "
        "the pool or enable active health checks.",
        (r"upstream connect error or disconnect/reset before headers", r"connect\(\) failed \(11[0-3]:",
         r"(?i:connection refused)", r"\bECONNREFUSED\b", r"No route to host", r"connect\(\) to \S+ failed"),
    ),
    Signature(
        "upstream_timeout", "R008",
        "The router gave up waiting for the upstream's response (its timeout is shorter than the backend's "
        "latency).",
        "Raise the router timeout above the backend's p99 (nginx proxy_read_timeout, Envoy route timeout, "
        "HAProxy timeout server), or make the backend faster.",
        (r"upstream request timeout", r"upstream timed out \(110", r"(?i:504 Gateway Time-?out)"),
    ),
    Signature(
        "upstream_overflow", "R009",
        "The router refused or queued the request because the upstream's connection or request limit was "
        "reached (circuit breaker, queue timeout).",
        "Add backend capacity or raise the limits (Envoy circuit breakers, HAProxy maxconn) in step with what "
        "backends can serve; shed load early.",
        (r"upstream_rq_pending_overflow", r"circuit breaker open", r"Queue timeout"),
    ),
    Signature(
        "retry_limit_exceeded", "R005",
        "The router exhausted its retries for the request.",
        "Find why the first attempt fails; cap retries with a budget rather than a count.",
        (),
    ),
    Signature(
        "deadline_exceeded", "R012",
        "A request or RPC ran past its deadline (gRPC DEADLINE_EXCEEDED, Go context deadline).",
        "Find the slow hop from per-stage timing; raise the deadline only if the work legitimately needs it.",
        (r"context deadline exceeded", r"DeadlineExceeded", r"DEADLINE_EXCEEDED", r"deadline exceeded"),
    ),
    Signature(
        "gpu_oom", "N011",
        "The process ran out of GPU memory.",
        "Lower batch size or max sequence length, use reduced precision or activation checkpointing, free other "
        "GPU processes; check for memory growth.",
        (r"CUDA out of memory", r"OutOfMemoryError", r"CUDA error: out of memory", r"CUDA_ERROR_OUT_OF_MEMORY"),
    ),
    Signature(
        "gpu_xid", "N001",
        "The NVIDIA driver reported an Xid error for a GPU.",
        "Act per Xid code (see the finding): application errors -> fix or restart the app; hardware errors -> "
        "reset the GPU, reboot or drain the node.",
        (r"NVRM: Xid",),
    ),
    Signature(
        "host_oom_kill", "N006",
        "The kernel's OOM killer ended a process: the host ran out of memory (a model server or data loader dies "
        "without a Python traceback).",
        "Lower the number of workers or the data cached in RAM, set memory limits that match the container, add "
        "RAM or move work to another node.",
        (r"Out of memory: Kill(?:ed)? process", r"invoked oom-killer", r"oom-kill:", r"Memory cgroup out of memory"),
    ),
    Signature(
        "model_server_dead", None,
        "The model server's engine died (vLLM AsyncEngineDeadError / engine core died); every request after it "
        "fails until the process restarts.",
        "Read the first error before this line (often CUDA OOM, an NCCL failure or an illegal memory access); make "
        "the liveness probe fail when the engine is dead so the pod restarts.",
        (r"AsyncEngineDeadError", r"EngineDeadError", r"Engine loop has died", r"[Ee]ngine core .{0,40}died"),
    ),
    Signature(
        "kv_cache_preemption", None,
        "The model server preempted running sequences for lack of KV-cache space (vLLM PreemptionMode); they are "
        "recomputed or swapped, which multiplies latency.",
        "Lower max_num_seqs / max batch tokens, raise gpu_memory_utilization, or use a GPU with more memory.",
        (r"preempted by PreemptionMode", r"not enough KV cache space"),
    ),
    Signature(
        "gpu_collective_failure", None,
        "A GPU collective (NCCL) failed or timed out: one rank is dead, hung or unreachable.",
        "Find the failing rank (its own log, Xid errors on its node); check NCCL_DEBUG=INFO output and the network "
        "between nodes; set NCCL timeouts so a hang fails fast.",
        (r"NCCL error", r"ncclInternalError", r"ncclSystemError", r"Watchdog caught collective operation timeout"),
    ),
    Signature(
        "gpu_fault", None,
        "A CUDA kernel faulted (illegal memory access, device-side assert): the CUDA context is unusable.",
        "Restart the process; rerun with CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer to find the kernel; check Xid "
        "errors on the node.",
        (r"illegal memory access", r"device-side assert triggered", r"cudaErrorIllegalAddress",
         r"CUDA error: unspecified launch failure"),
    ),
    Signature(
        "client_disconnect", None,
        "The client went away before the response was sent (nginx 499, Envoy DC / code 0, HAProxy C*).",
        "Usually a client timeout shorter than the service's latency: compare the client's timeout with p99.",
        (),
    ),
)
"""Every signature, in matching priority order."""

BY_ID: Mapping[str, Signature] = MappingProxyType({s.id: s for s in SIGNATURES})
"""Signatures by id."""

_SIGNATURE_IDS = [s.id for s in SIGNATURES if s.patterns]
_RANK = {sig_id: rank for rank, sig_id in enumerate(_SIGNATURE_IDS)}
_COMBINED = re.compile(
    "|".join(
        f"(?P<{sig_id}>{'|'.join(BY_ID[sig_id].patterns)})"
        for sig_id in _SIGNATURE_IDS
    )
)
# Cheap pre-filter: lines with none of these words cannot match any pattern (most app-log lines).
_PREFILTER = re.compile(
    r"(?i)upstream|NOSRV|circuit breaker|queue timeout|server available|reset|refused|ECONN|route to host|connect|"
    r"time-?out|overflow|deadline|"
    r"DEADLINE|memory|OutOfMemory|Xid|assign requested|EADDRNOTAVAIL|open files|EMFILE|oom|EngineDead|engine|"
    r"preempt|KV cache|NCCL|nccl|device-side|cudaError|CUDA error"
)


def match_text(line: str) -> str | None:
    """The id of the first signature whose text pattern occurs in ``line``, or None."""
    if not _PREFILTER.search(line):
        return None
    best: int | None = None
    for match in _COMBINED.finditer(line):  # every match, not just the leftmost: catalog order decides
        rank = _RANK[match.lastgroup or ""]
        if best is None or rank < best:
            best = rank
    return _refine(_SIGNATURE_IDS[best], line) if best is not None else None


def _refine(sig_id: str, line: str) -> str:
    """Envoy's "reset before headers" message names the reset reason; a connection termination is a reset."""
    if sig_id == "upstream_connect_error" and "reset reason: connection termination" in line:
        return "upstream_reset"
    return sig_id


# --- structured access-log fields ---------------------------------------------------------------------------

ENVOY_FLAG_SIGNATURES: tuple[tuple[str, str], ...] = (
    ("UH", "no_healthy_upstream"),
    ("NR", "no_healthy_upstream"),
    ("UF", "upstream_connect_error"),
    ("UC", "upstream_reset"),
    ("UR", "upstream_reset"),
    ("UT", "upstream_timeout"),
    ("UO", "upstream_overflow"),
    ("URX", "retry_limit_exceeded"),
    ("DC", "client_disconnect"),
)
"""Envoy ``%RESPONSE_FLAGS%`` (short form, comma-separated) to signature, in priority order."""

ENVOY_FLAG_PATTERNS: tuple[tuple[str, str], ...] = tuple(
    (rf"(?:^|,){flag}(?:,|$)", sig_id) for flag, sig_id in ENVOY_FLAG_SIGNATURES
)
"""The same as regular expressions on the flags field (shared by the Python and polars parsers)."""

_ENVOY_FLAG_RES = tuple((re.compile(p), s) for p, s in ENVOY_FLAG_PATTERNS)


def envoy_signature(flags: str, status: int | None) -> str | None:
    """Signature of an Envoy access-log line from its response flags (and code 0 = client gone)."""
    if flags and flags != "-":
        for pattern, sig_id in _ENVOY_FLAG_RES:
            if pattern.search(flags):
                return sig_id
    if status == 0:
        return "client_disconnect"
    return None


NGINX_NO_UPSTREAM_RE = r"^[A-Za-z_][\w.-]*$"
"""``$upstream_addr`` that is an upstream block name instead of an address: nginx found no live server."""

_NGINX_NO_UPSTREAM = re.compile(NGINX_NO_UPSTREAM_RE)


def nginx_signature(status: int | None, upstream: str) -> str | None:
    """Signature of an nginx access-log line from its status and ``$upstream_addr``.

    504 is a timeout; 502 is a connect failure or reset (the error log tells which); 502/503 whose upstream is a
    group name (no address) means no live upstream; 499 is a client that went away.
    """
    if status is None:
        return None
    if status in (502, 503) and _NGINX_NO_UPSTREAM.match(upstream):
        return "no_healthy_upstream"
    if status == 504:
        return "upstream_timeout"
    if status == 502:
        return "upstream_connect_error"
    if status == 499:
        return "client_disconnect"
    return None


def haproxy_signature(termination: str, server: str, status: int | None) -> str | None:
    """Signature of an HAProxy httplog line from its two-letter termination state and server name.

    First letter: who ended it (C client, S server, P/R/I proxy, D down, L local, K killed; lower case: a timeout);
    second: when (R request, Q queue, C connect, H headers, D data, L last byte, T tarpit).
    """
    if server == "<NOSRV>" and status == 503:
        return "no_healthy_upstream"
    if len(termination) < 2:
        return None
    who, when = termination[0], termination[1]
    if who == "s" and when in "HD":
        return "upstream_timeout"
    if who == "s" and when == "C" or who == "S" and when == "C":
        return "upstream_connect_error"
    if who == "S" and when in "HD":
        return "upstream_reset"
    if who == "s" and when == "Q" or who == "S" and when == "Q":
        return "upstream_overflow"
    if who in "Cc":
        return "client_disconnect"
    return None
