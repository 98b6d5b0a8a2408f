"""The failure-signature catalog: what a log line means, which finding it maps to, and the fix.

Signatures are found two ways. Access-log lines carry structured fields (Envoy ``%RESPONSE_FLAGS%``, HAProxy's
termination state, nginx's status and ``$upstream_addr``), classified by :func:`envoy_signatures`,
:func:`haproxy_signature` and :func:`nginx_signature`: every Envoy flag and every HAProxy termination state is
known, and a comma list of flags (``UF,URX``) counts under each flag it carries. Free-text lines (nginx error log,
app logs, tracebacks, kernel log) are matched against the text patterns of :data:`SIGNATURES`
(:func:`match_text_all`): a line can carry several signatures (``Load model failed: m, error: Worker died`` is a
load failure and a dead worker), minus the pairs where one explains the other (:data:`SUPPRESSES`).

Matching is linear in the line and cheap for the lines that match nothing (most): the line's words meet the patterns'
key words in one set intersection, then each pattern whose key word is there checks its literal hint with ``in``
and runs its regular expression (literal-led or bounded) only when the hint is there.
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
    """Text patterns: a literal (case-sensitive substring), or ``hint||regex`` where ``hint`` is a lower-case literal
    the line must contain for the regular expression to be tried."""


SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "xds_stream_closed", None,
        "The proxy's connection to its control plane (xDS, e.g. istiod) closed or could not be opened; it keeps "
        "its last configuration. No request traffic was refused.",
        "Check that the control plane is up and reachable from the pod (istiod service, its endpoints, mTLS); it is "
        "normal for a few seconds while a sidecar starts.",
        ("grpc config stream||gRPC config stream (?:to \\S{1,200} )?closed", "StreamAggregatedResources",
         "DeltaAggregatedResources"),
    ),
    Signature(
        "no_healthy_upstream", "R006",
        "The router had no healthy backend to send the request to (all failed health checks or were ejected).",
        "Find why backends fail health checks (crashing, still loading the model, probe too strict); gate "
        "readiness on the model being loaded; check Envoy's panic threshold and outlier ejection.",
        ("no healthy upstream", "no live upstreams", "has no server available"),
    ),
    Signature(
        "socket_exhaustion", "N009",
        "No local port or socket could be allocated for a new connection.",
        "Reuse connections (keep-alive pools), widen net.ipv4.ip_local_port_range, raise the fd limit.",
        ("Cannot assign requested address", "eaddrnotavail||\\bEADDRNOTAVAIL\\b", "Too many open files",
         "emfile||\\bEMFILE\\b"),
    ),
    Signature(
        "upstream_reset", "R007",
        "The upstream closed or reset the connection before a complete response (crash, keep-alive race, "
        "worker killed).",
        "Check the backend's logs for crashes/OOM kills at these times; make the backend's keep-alive timeout "
        "longer than the router's; retry idempotent requests on reset.",
        ("upstream prematurely closed connection", "reset reason: connection termination",
         "connection reset by peer||(?i:connection reset by peer)", "econnreset||\\bECONNRESET\\b",
         "recv() failed (104"),
    ),
    Signature(
        "upstream_connect_error", "R007",
        "The router could not open a connection to the upstream (nothing listening, refused, unreachable).",
        "Check that the backend is up and listening on the address the router uses; remove dead backends from "
        "the pool or enable active health checks.",
        ("upstream connect error or disconnect/reset before headers", "connect() failed||connect\\(\\) failed "
         "\\(11[0-3]:", "connection refused||(?i:connection refused)", "econnrefused||\\bECONNREFUSED\\b",
         "No route to host", "connect() to ||connect\\(\\) to \\S{1,300} failed"),
    ),
    Signature(
        "upstream_protocol_error", "R007",
        "The upstream answered with something the router could not parse (Envoy UPE: a protocol error).",
        "Check the backend's HTTP/1.1 vs HTTP/2 settings against the router's cluster protocol options and look for "
        "a backend that writes malformed headers or closes mid-response.",
    ),
    Signature(
        "dns_resolution_failed", "R007",
        "The router could not resolve the upstream's name (Envoy DF).",
        "Check the cluster's DNS name and the router's resolver; prefer STRICT_DNS/EDS with a stable service name.",
    ),
    Signature(
        "upstream_timeout", "R008",
        "The router gave up waiting for the upstream's response (its timeout is shorter than the backend's "
        "latency).",
        "Raise the router timeout above the backend's p99 (nginx proxy_read_timeout, Envoy route timeout, "
        "HAProxy timeout server), or make the backend faster.",
        ("upstream request timeout", "upstream timed out (110", "504 gateway time||(?i:504 Gateway Time-?out)"),
    ),
    Signature(
        "upstream_max_stream_duration", "R008",
        "The request ran past the router's maximum stream duration for the upstream (Envoy UMSDR).",
        "Raise max_stream_duration on the route or cluster above the longest legitimate request (long streaming "
        "generations), or make the backend faster.",
    ),
    Signature(
        "upstream_overflow", "R009",
        "The router refused or queued the request because the upstream's connection or request limit was "
        "reached (circuit breaker, queue timeout).",
        "Add backend capacity or raise the limits (Envoy circuit breakers, HAProxy maxconn) in step with what "
        "backends can serve; shed load early.",
        ("upstream_rq_pending_overflow", "circuit breaker open", "Queue timeout"),
    ),
    Signature(
        "retry_limit_exceeded", "R005",
        "The router exhausted its retries for the request.",
        "Find why the first attempt fails; cap retries with a budget rather than a count.",
    ),
    Signature(
        "deadline_exceeded", "R012",
        "A request or RPC ran past its deadline (gRPC DEADLINE_EXCEEDED, Go context deadline).",
        "Find the slow hop from per-stage timing; raise the deadline only if the work legitimately needs it.",
        ("context deadline exceeded", "DeadlineExceeded", "DEADLINE_EXCEEDED", "deadline exceeded"),
    ),
    Signature(
        "gpu_oom", "N011",
        "The process ran out of GPU memory.",
        "Lower batch size or max sequence length, use reduced precision or activation checkpointing, free other "
        "GPU processes; check for memory growth.",
        ("CUDA out of memory", "OutOfMemoryError", "CUDA error: out of memory", "CUDA_ERROR_OUT_OF_MEMORY"),
    ),
    Signature(
        "gpu_xid", "N001",
        "The NVIDIA driver reported an Xid error for a GPU.",
        "Act per Xid code (see the finding): application errors -> fix or restart the app; hardware errors -> "
        "reset the GPU, reboot or drain the node.",
        ("NVRM: Xid",),
    ),
    Signature(
        "gpu_fallen_off_bus", "N001",
        "The NVIDIA driver lost a GPU on the PCIe bus (the same as Xid 79, printed without an Xid line).",
        "Drain the node and reboot it; check the GPU's power, cooling and PCIe seating if it recurs.",
        ("fallen off the bus",),
    ),
    Signature(
        "gpu_init_failed", "N012",
        "The NVIDIA driver could not initialise a GPU (RmInitAdapter failed): the GPU is present but unusable.",
        "Reset the GPU or reboot the node; check the driver/firmware versions and the GPU's power; drain and RMA if "
        "it keeps failing.",
        ("RmInitAdapter failed", "rm_init_adapter failed"),
    ),
    Signature(
        "host_oom_kill", "N006",
        "The kernel's OOM killer ended a process: the host ran out of memory (a model server or data loader dies "
        "without a Python traceback).",
        "Lower the number of workers or the data cached in RAM, set memory limits that match the container, add "
        "RAM or move work to another node.",
        ("out of memory: kill||Out of memory: Kill(?:ed)? process", "invoked oom-killer", "oom-kill:",
         "Memory cgroup out of memory"),
    ),
    Signature(
        "container_oom_killed", "N014",
        "Kubernetes reports a container killed for exceeding its memory limit (OOMKilled, exit code 137).",
        "Raise the container's memory limit to its real peak (model weights + KV cache + workers) or lower what it "
        "holds (workers, batch size, caches).",
        ("OOMKilled",),
    ),
    Signature(
        "crash_loop_backoff", "N014",
        "Kubernetes keeps restarting a container that exits (CrashLoopBackOff / back-off restarting failed "
        "container).",
        "Read the container's previous logs (kubectl logs --previous) for why it exits; a model server that dies at "
        "load often runs out of GPU or host memory.",
        ("CrashLoopBackOff", "restarting failed container||(?i:back-off \\S{1,16} restarting failed container)"),
    ),
    Signature(
        "probe_failed", "N014",
        "A Kubernetes liveness, readiness or startup probe failed (the pod is taken out of service or restarted).",
        "Make the probe match what the server can answer while busy (a cheap /health, a timeout above its p99, a "
        "startupProbe long enough to load the model).",
        ("probe failed||(?:Readiness|Liveness|Startup) probe failed", "probe errored||(?:Readiness|Liveness|Startup) "
         "probe errored", '"Probe failed"', "failed liveness probe", "failed readiness probe",
         "failed startup probe"),
    ),
    Signature(
        "apiserver_connection_lost", None,
        "A client lost its HTTP/2 connection to the Kubernetes API server (watches restart; node status and "
        "leases are not updated meanwhile).",
        "Check the API server's health and the network path to it; repeated losses make nodes NotReady.",
        ("http2: client connection lost",),
    ),
    Signature(
        "model_server_dead", "S014",
        "The model server's engine died (vLLM AsyncEngineDeadError / EngineDeadError / engine core died); every "
        "request after it fails until the process restarts.",
        "Read the first error before this line (often CUDA OOM, an NCCL failure or an illegal memory access); make "
        "the liveness probe fail when the engine is dead so the pod restarts.",
        ("AsyncEngineDeadError", "EngineDeadError", "Engine loop has died",
         "died||[Ee]ngine ?[Cc]ore.{0,40} died", "EngineCore encountered a fatal error",
         "failed (engine dead)"),
    ),
    Signature(
        "engine_iteration_timeout", "S014",
        "The model server's engine stopped making progress (vLLM \"Engine iteration timed out\"): it hangs, usually "
        "on a collective or a stuck GPU, and dies next.",
        "Look for NCCL or Xid errors at the same time; set the engine's iteration timeout so a hang fails fast and "
        "the pod restarts.",
        ("Engine iteration timed out",),
    ),
    Signature(
        "worker_died", "S014",
        "A model-server worker process died (TorchServe backend worker died): its requests fail while it restarts.",
        "Read the worker's own log before this line (out of memory, an import or CUDA error at load); lower the "
        "workers per model or their memory.",
        ("worker died||(?i:worker died)", "worker process died||(?i:worker process died)"),
    ),
    Signature(
        "model_load_failed", "S014",
        "The model server failed to load a model (Triton failed to load / UNAVAILABLE, TorchServe Load model failed, "
        "a CUDA error at load): the model cannot serve.",
        "Fix the first load error (missing files, wrong backend or TensorRT engine for this GPU, out of memory) and "
        "gate readiness on the model being loaded.",
        ("Load model failed", "failed to load||failed to load (?:all models|model|'[^']{1,200}')",
         "failed to load model||(?i:failed to load model)", "| UNAVAILABLE: ", "failed to poll model"),
    ),
    Signature(
        "kv_cache_preemption", None,
        "The model server preempted running sequences for lack of KV-cache space (vLLM PreemptionMode); they are "
        "recomputed or swapped, which multiplies latency.",
        "Lower max_num_seqs / max batch tokens, raise gpu_memory_utilization, or use a GPU with more memory.",
        ("preempted by PreemptionMode", "not enough KV cache space"),
    ),
    Signature(
        "gpu_collective_failure", None,
        "A GPU collective (NCCL) failed or timed out: one rank is dead, hung or unreachable.",
        "Find the failing rank (its own log, Xid errors on its node); check NCCL_DEBUG=INFO output and the network "
        "between nodes; set NCCL timeouts so a hang fails fast.",
        ("NCCL error", "ncclInternalError", "ncclSystemError", "Watchdog caught collective operation timeout"),
    ),
    Signature(
        "gpu_fault", None,
        "A CUDA kernel faulted (illegal memory access, device-side assert): the CUDA context is unusable.",
        "Restart the process; rerun with CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer to find the kernel; check Xid "
        "errors on the node.",
        ("illegal memory access", "device-side assert triggered", "cudaErrorIllegalAddress",
         "CUDA error: unspecified launch failure"),
    ),
    Signature(
        "no_route", None,
        "The router had no route for the request (Envoy NR, 404): a configuration or client error, not a backend "
        "failure.",
        "Check the route table (hosts, path prefixes) against what clients call; a burst after a deploy is a missing "
        "route.",
    ),
    Signature(
        "no_cluster", None,
        "The route points at an upstream cluster the router does not have (Envoy NC): a configuration error.",
        "Check that the cluster the route names exists (a typo, or a cluster removed before its route).",
    ),
    Signature(
        "local_health_check_failed", None,
        "The local service failed the router's health check (Envoy LH) and the router answered 503.",
        "Check the local service's health endpoint; it is failing or slower than the health-check timeout.",
    ),
    Signature(
        "local_reset", None,
        "The router reset the connection itself (Envoy LR).",
        "Look at the router's own limits (overload manager, buffer limits) around these times.",
    ),
    Signature(
        "local_response", None,
        "The router answered the request itself without a backend (HAProxy L*: a redirect, a CORS preflight, a "
        "stats page, an http-request return).",
        "Nothing to fix unless the answers are errors the configuration did not intend.",
    ),
    Signature(
        "proxy_denied", None,
        "The router refused the request by its own rules (HAProxy P*: a deny, a bad request, a rewrite failure).",
        "Check the frontend's http-request rules and the request's validity.",
    ),
    Signature(
        "router_resource_exhausted", None,
        "The router ran out of a local resource for the session (HAProxy R*: memory, sockets, ports).",
        "Raise the router's limits (maxconn, ulimit, ip_local_port_range) or add router capacity.",
    ),
    Signature(
        "router_internal_error", None,
        "The router hit an internal error for the session (HAProxy I*).",
        "Upgrade the router; report the bug with the log line.",
    ),
    Signature(
        "session_killed", None,
        "An administrator or a rule killed the session (HAProxy K*).",
        "Nothing to fix unless it was not intended.",
    ),
    Signature(
        "rate_limited", None,
        "The router limited the request's rate (Envoy RL, nginx/HAProxy 429).",
        "Expected when limits are meant; raise the limit or add capacity if legitimate traffic is refused.",
    ),
    Signature(
        "rate_limit_service_error", None,
        "The rate-limit service could not be reached (Envoy RLSE).",
        "Check the rate-limit service; decide whether the router fails open or closed without it.",
    ),
    Signature(
        "ext_authz_denied", None,
        "An external authorisation service denied the request (Envoy UAEX): an auth redirect or refusal.",
        "Expected for unauthenticated requests; check the auth service if authenticated ones are refused.",
    ),
    Signature(
        "invalid_request_headers", None,
        "The router rejected the request's headers (Envoy IH).",
        "Fix the client's headers (strict header checks are on).",
    ),
    Signature(
        "downstream_protocol_error", None,
        "The client sent something the router could not parse (Envoy DPE).",
        "Check the client's protocol (HTTP/2 settings, malformed requests).",
    ),
    Signature(
        "stream_idle_timeout", None,
        "A stream was idle longer than the router's idle timeout (Envoy SI): long-lived streams (WebSocket, SSE) "
        "are cut.",
        "Raise the route's idle_timeout for streaming endpoints, or send keep-alive events.",
    ),
    Signature(
        "duration_timeout", None,
        "A request or connection ran past its maximum duration (Envoy DT).",
        "Raise max_connection_duration / max_stream_duration for long requests.",
    ),
    Signature(
        "fault_injected", None,
        "The router injected a fault or a delay on purpose (Envoy FI / DI).",
        "Expected during fault-injection tests; remove the fault filter otherwise.",
    ),
    Signature(
        "overload_rejected", None,
        "The router shed the request under its own overload (Envoy OM overload manager, DO/UDO drop overload).",
        "Add router capacity or raise its overload thresholds; the backends may be fine.",
    ),
    Signature(
        "bad_gateway", None,
        "The router answered 502 and its log does not say which upstream failed (no $upstream_addr in the format).",
        "Log $upstream_addr/$upstream_status, or read the error log at the same time for the cause.",
    ),
    Signature(
        "client_disconnect", None,
        "The client went away before the response was sent (nginx 499, Envoy DC / code 0, HAProxy C*).",
        "Usually a client timeout shorter than the service's latency: compare the client's timeout with p99.",
    ),
)
"""Every signature, in matching priority order."""

BY_ID: Mapping[str, Signature] = MappingProxyType({s.id: s for s in SIGNATURES})
"""Signatures by id."""

SUPPRESSES: Mapping[str, frozenset[str]] = MappingProxyType({
    "xds_stream_closed": frozenset({"no_healthy_upstream", "upstream_connect_error", "upstream_reset"}),
    "socket_exhaustion": frozenset({"upstream_connect_error"}),
    "gpu_xid": frozenset({"gpu_fallen_off_bus"}),
    "gpu_oom": frozenset({"gpu_fault"}),
    "upstream_reset": frozenset({"upstream_connect_error"}),
})
"""A signature found in a line drops these others from it (the first explains them)."""


@dataclass(frozen=True)
class _TextPattern:
    signature: str
    hint: str
    """Lower-case literal the line must contain."""
    regex: re.Pattern[str] | None
    """Tried only when the hint is present; None: the case-sensitive literal itself must occur."""
    literal: str


def _compile(signature: Signature) -> list[_TextPattern]:
    out = []
    for pattern in signature.patterns:
        if "||" in pattern:
            hint, regex = pattern.split("||", 1)
            out.append(_TextPattern(signature.id, hint.lower(), re.compile(regex), ""))
        else:
            out.append(_TextPattern(signature.id, pattern.lower(), None, pattern))
    return out


_TEXT_PATTERNS: tuple[_TextPattern, ...] = tuple(p for s in SIGNATURES for p in _compile(s))
_RANK: dict[str, int] = {s.id: rank for rank, s in enumerate(SIGNATURES)}
_WORDS = bytes(c if 48 <= c <= 57 or 97 <= c <= 122 else 32 for c in range(256))
"""Lower-case UTF-8 bytes -> words: every byte that is not an ASCII lower-case letter or digit becomes a space."""


def words(low: str) -> list[bytes]:
    """The words of lower-cased text (runs of ASCII letters and digits), as bytes."""
    return low.encode("utf-8", "replace").translate(_WORDS).split()


def _key_word(hint: str) -> bytes:
    """The longest word of a hint: a line that contains the hint has it as a word too."""
    return max(words(hint), key=len)


_BY_WORD: dict[bytes, tuple[_TextPattern, ...]] = {}
for _pattern in _TEXT_PATTERNS:
    _BY_WORD[_key_word(_pattern.hint)] = (*_BY_WORD.get(_key_word(_pattern.hint), ()), _pattern)
_KEY_WORDS = frozenset(_BY_WORD)


def match_text_all(line: str) -> tuple[str, ...]:
    """Every signature whose text pattern occurs in ``line``, in catalog order, minus those another explains.

    The line's words meet the patterns' key words in one set intersection (C speed): most lines stop there.
    """
    low = line.lower()
    keys = _KEY_WORDS.intersection(words(low))
    if not keys:
        return ()
    found: set[str] = set()
    for key in keys:
        for pattern in _BY_WORD[key]:
            if pattern.signature in found or pattern.hint not in low:
                continue
            if pattern.regex is not None:
                if pattern.regex.search(line) is None:
                    continue
            elif pattern.literal not in line:
                continue
            found.add(pattern.signature)
    if not found:
        return ()
    ordered = sorted(found, key=_RANK.__getitem__)
    if len(ordered) > 1:
        dropped = set().union(*(SUPPRESSES.get(s, frozenset()) for s in ordered))
        ordered = [s for s in ordered if s not in dropped]
    if ordered and ordered[0] == "upstream_connect_error" and "reset reason: connection termination" in line:
        ordered[0] = "upstream_reset"  # Envoy's "reset before headers" message names the reset reason
    return tuple(ordered)


def match_text_reference(line: str) -> tuple[str, ...]:
    """:func:`match_text_all` by trying every pattern (slow; the tests check that both agree)."""
    found = {p.signature for p in _TEXT_PATTERNS if p.hint in line.lower()
             and (p.regex.search(line) if p.regex is not None else p.literal in line)}
    ordered = sorted(found, key=_RANK.__getitem__)
    if len(ordered) > 1:
        dropped = set().union(*(SUPPRESSES.get(s, frozenset()) for s in ordered))
        ordered = [s for s in ordered if s not in dropped]
    if ordered and ordered[0] == "upstream_connect_error" and "reset reason: connection termination" in line:
        ordered[0] = "upstream_reset"
    return tuple(ordered)


def match_text(line: str) -> str | None:
    """The first signature (catalog order) whose text pattern occurs in ``line``, or None."""
    found = match_text_all(line)
    return found[0] if found else None


# --- structured access-log fields ---------------------------------------------------------------------------

ENVOY_FLAGS: Mapping[str, tuple[str, str | None]] = MappingProxyType({
    "UH": ("NoHealthyUpstream", "no_healthy_upstream"),
    "UF": ("UpstreamConnectionFailure", "upstream_connect_error"),
    "UO": ("UpstreamOverflow", "upstream_overflow"),
    "NR": ("NoRouteFound", "no_route"),
    "URX": ("UpstreamRetryLimitExceeded", "retry_limit_exceeded"),
    "NC": ("NoClusterFound", "no_cluster"),
    "DT": ("DurationTimeout", "duration_timeout"),
    "DC": ("DownstreamConnectionTermination", "client_disconnect"),
    "LH": ("FailedLocalHealthCheck", "local_health_check_failed"),
    "UT": ("UpstreamRequestTimeout", "upstream_timeout"),
    "LR": ("LocalReset", "local_reset"),
    "UR": ("UpstreamRemoteReset", "upstream_reset"),
    "UC": ("UpstreamConnectionTermination", "upstream_reset"),
    "DI": ("DelayInjected", "fault_injected"),
    "FI": ("FaultInjected", "fault_injected"),
    "RL": ("RateLimited", "rate_limited"),
    "UAEX": ("UnauthorizedExternalService", "ext_authz_denied"),
    "RLSE": ("RateLimitServiceError", "rate_limit_service_error"),
    "IH": ("InvalidEnvoyRequestHeaders", "invalid_request_headers"),
    "SI": ("StreamIdleTimeout", "stream_idle_timeout"),
    "DPE": ("DownstreamProtocolError", "downstream_protocol_error"),
    "UPE": ("UpstreamProtocolError", "upstream_protocol_error"),
    "UMSDR": ("UpstreamMaxStreamDurationReached", "upstream_max_stream_duration"),
    "OM": ("OverloadManagerTerminated", "overload_rejected"),
    "DF": ("DnsResolutionFailed", "dns_resolution_failed"),
    "DO": ("DropOverload", "overload_rejected"),
    "UDO": ("UnconditionalDropOverload", "overload_rejected"),
    "DR": ("DownstreamRemoteReset", "client_disconnect"),
    "RFCF": ("ResponseFromCacheFilter", None),
    "NFCF": ("NoFilterConfigFound", "no_route"),
    "UPCF": ("UpstreamProtocolError", "upstream_protocol_error"),
})
"""Every Envoy ``%RESPONSE_FLAGS%`` short name -> (long name as in ``%RESPONSE_FLAGS_LONG%``, signature or None)."""

_ENVOY_BY_NAME = {name: flag for flag, (name, _) in ENVOY_FLAGS.items()}

ENVOY_LOCAL_REPLY_FLAGS = frozenset({"UH", "NR", "NC", "UO", "RL", "UAEX", "RLSE", "IH", "LH", "FI", "OM", "DO",
                                     "UDO", "DPE", "NFCF"})
"""Flags of requests the router answered itself, without an upstream response (their duration is the router's)."""


def envoy_flags(flags: str | None) -> tuple[str, ...]:
    """The short flags of a ``%RESPONSE_FLAGS%`` field (``UF,URX``; long names too), ``()`` for ``-`` or none."""
    if not flags or flags == "-":
        return ()
    out = []
    for part in flags.split(",")[:16]:
        flag = part.strip()
        out.append(_ENVOY_BY_NAME.get(flag, flag))
    return tuple(out)


def envoy_signatures(flags: str | None, status: int | None) -> tuple[str, ...]:
    """Every signature of an Envoy access-log line: one per flag it carries (and code 0 = client gone)."""
    found: list[str] = []
    for flag in envoy_flags(flags):
        entry = ENVOY_FLAGS.get(flag)
        if entry is not None and entry[1] is not None and entry[1] not in found:
            found.append(entry[1])
    if status == 0 and "client_disconnect" not in found:
        found.append("client_disconnect")
    if status == 429 and "rate_limited" not in found:
        found.append("rate_limited")
    return tuple(found)


def envoy_signature(flags: str, status: int | None) -> str | None:
    """The first signature of :func:`envoy_signatures`, or None."""
    found = envoy_signatures(flags, status)
    return found[0] if found else None


def is_group_name(address: str) -> bool:
    """True for an nginx ``$upstream_addr`` that is an upstream block's name, not an address: no live server.

    nginx logs ``host:port`` (or ``unix:/path``) for every server it tried; the group's name appears when it found
    none to try.
    """
    return bool(address) and address != "-" and ":" not in address


def nginx_signature(status: int | None, upstream: str, has_upstream: bool = True) -> str | None:
    """Signature of an nginx access-log line from its status and ``$upstream_addr`` (its last value).

    504 is a timeout; 502 a connect failure or reset (the error log tells which); 502/503 whose upstream is a group
    name means no live upstream; 499 a client that went away; 429 rate limiting. Without ``$upstream_addr`` in the
    format, a 502 is only ``bad_gateway``: nothing says which upstream failed, or whether one was tried.
    """
    if status is None:
        return None
    if status in (502, 503) and is_group_name(upstream):
        return "no_healthy_upstream"
    if status == 504:
        return "upstream_timeout"
    if status == 502:
        return "upstream_connect_error" if has_upstream and upstream not in ("", "-") else "bad_gateway"
    if status == 499:
        return "client_disconnect"
    if status == 429:
        return "rate_limited"
    return None


HAPROXY_WHO: Mapping[str, str] = MappingProxyType({
    "C": "the client aborted", "S": "the server aborted or refused", "P": "the proxy blocked it",
    "L": "the proxy answered it locally", "R": "a proxy resource ran out", "I": "an internal proxy error",
    "D": "the server went down", "U": "the proxy's side was closed (on a replaced server)",
    "K": "it was killed by an admin or rule", "c": "the client timed out", "s": "the server timed out",
    "-": "normal end",
})
"""First letter of HAProxy's termination state: who or what ended the session."""
HAPROXY_WHEN: Mapping[str, str] = MappingProxyType({
    "R": "while reading the request", "Q": "while queued", "C": "while connecting to the server",
    "H": "while waiting for response headers", "D": "during the data phase", "L": "while sending the last bytes",
    "T": "while tarpitted", "-": "normally",
})
"""Second letter of HAProxy's termination state: at which phase."""


def haproxy_signature(termination: str, server: str, status: int | None) -> str | None:
    """Signature of an HAProxy log line from its two-letter termination state and server name.

    First letter: who ended it (C client, S server, P proxy, L local, R resource, I internal, D down, K killed;
    lower case: a timeout); second: when (R request, Q queue, C connect, H headers, D data, L last byte, T tarpit).
    ``<NOSRV>`` is "no server" only when the server side ended it with a 503 (``SC``/``sQ``/``--``); with ``LR`` the
    proxy answered itself (a redirect, a CORS preflight).
    """
    if len(termination) < 2:
        return "no_healthy_upstream" if server == "<NOSRV>" and status == 503 else None
    who, when = termination[0], termination[1]
    if who == "L":
        return "local_response"
    if who == "P":
        return "proxy_denied"
    if who == "K":
        return "session_killed"
    if who == "I":
        return "router_internal_error"
    if who == "R":
        return "socket_exhaustion" if when == "C" else "router_resource_exhausted"
    if who in "Cc":
        return "client_disconnect"
    if server == "<NOSRV>" and (status == 503 or who in "Ss" or when == "Q"):
        return "no_healthy_upstream"
    if who in "sS" and when == "Q":
        return "upstream_overflow"
    if who == "s" and when in "HDL":
        return "upstream_timeout"
    if who in "sS" and when == "C":
        return "upstream_connect_error"
    if who in "SDU" and when in "HDLR":
        return "upstream_reset"
    if who == "D":
        return "upstream_reset"
    if who == "-" and status == 503 and server == "<NOSRV>":
        return "no_healthy_upstream"
    if status == 429:
        return "rate_limited"
    return None
