"""Findings and the finding catalog: the one place that lists every code.

A finding is a named, evidenced verdict about a workload. Codes and names are stable forever: tests, users' CI and
suppressions depend on them. New findings get the next free code in their group; none is ever renumbered.
"""

from __future__ import annotations

import enum
import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import Any


class Severity(str, enum.Enum):
    """How much a finding matters, from ``critical`` down to ``info``."""

    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Larger is more severe: critical=4 ... info=0."""
        return _SEVERITY_RANK[self]

    @classmethod
    def parse(cls, text: str) -> Severity:
        """Severity from its name, case-insensitive; raises ValueError naming the valid values."""
        try:
            return cls(text.strip().lower())
        except ValueError:
            valid = ", ".join(s.value for s in cls)
            raise ValueError(f"unknown severity {text!r}; expected one of {valid}") from None


_SEVERITY_RANK = {
    Severity.CRITICAL: 4,
    Severity.HIGH: 3,
    Severity.MEDIUM: 2,
    Severity.LOW: 1,
    Severity.INFO: 0,
}


@dataclass(frozen=True)
class Location:
    """Where in the user's code or system a finding points."""

    file: str
    """Path of the file (as the user would open it), or a device/log name."""
    line: int | None = None
    """1-based line number, when known."""
    column: int | None = None
    """1-based column, when known."""
    function: str | None = None
    """Enclosing function or call site name, when known."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form; absent parts are left out."""
        out: dict[str, Any] = {"file": self.file}
        if self.line is not None:
            out["line"] = self.line
        if self.column is not None:
            out["column"] = self.column
        if self.function is not None:
            out["function"] = self.function
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Location:
        """Inverse of :meth:`to_dict`."""
        return cls(
            file=str(data["file"]),
            line=data.get("line"),
            column=data.get("column"),
            function=data.get("function"),
        )

    def __str__(self) -> str:
        if self.line is None:
            return self.file
        if self.column is None:
            return f"{self.file}:{self.line}"
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Finding:
    """One verdict with its evidence, as it appears in ``Result.findings``."""

    code: str
    """Stable code from the catalog, e.g. ``P001``."""
    name: str
    """Stable kebab-case name, e.g. ``data-starvation``."""
    severity: Severity
    """How much it matters."""
    title: str
    """One line with the numbers, e.g. "GPU waits for data 71% of each step"."""
    evidence: Mapping[str, Any] = field(default_factory=dict)
    """The measured numbers behind the verdict (JSON-serialisable)."""
    fix: str = ""
    """The concrete change to make."""
    risk: str = ""
    """What the fix costs or may break."""
    location: Location | None = None
    """Where it points, when known."""
    impact: float | None = None
    """Estimated share of run time (0-1) the finding explains, used to rank findings; None when unknown."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form, per the result contract."""
        out: dict[str, Any] = {
            "code": self.code,
            "name": self.name,
            "severity": self.severity.value,
            "title": self.title,
            "evidence": dict(self.evidence),
            "fix": self.fix,
        }
        if self.risk:
            out["risk"] = self.risk
        if self.location is not None:
            out["location"] = self.location.to_dict()
        if self.impact is not None:
            out["impact"] = self.impact
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        """Inverse of :meth:`to_dict`."""
        loc = data.get("location")
        return cls(
            code=str(data["code"]),
            name=str(data["name"]),
            severity=Severity(data["severity"]),
            title=str(data["title"]),
            evidence=dict(data.get("evidence") or {}),
            fix=str(data.get("fix") or ""),
            risk=str(data.get("risk") or ""),
            location=Location.from_dict(loc) if loc else None,
            impact=data.get("impact"),
        )


@dataclass(frozen=True)
class RuleSpec:
    """A catalog entry: what one code means, independent of any run."""

    code: str
    """Stable code, e.g. ``P001``."""
    name: str
    """Stable kebab-case name."""
    group: str
    """``P`` workload, ``S`` service, ``R`` routing, ``N`` node, ``C`` code."""
    severity: Severity
    """Default severity; a rule may raise or lower it with the evidence."""
    title: str
    """Short human title."""
    commands: tuple[str, ...]
    """Commands that can emit it."""
    fix: str
    """Default fix text."""
    risk: str
    """Default risk/tradeoff of the fix."""


GROUPS: Mapping[str, str] = MappingProxyType(
    {
        "P": "workload (profile)",
        "S": "service under load (load, profile --load-url, middleware)",
        "R": "routing (route, logs)",
        "N": "node (node, logs)",
        "C": "code (scan)",
    }
)

_H, _M, _L, _C, _I = Severity.HIGH, Severity.MEDIUM, Severity.LOW, Severity.CRITICAL, Severity.INFO
_PROF = ("profile",)
_SVC = ("load", "profile")
_ROUTE = ("route", "logs")
_NODE = ("node",)
_SCAN = ("scan",)

# (code, name, severity, title, commands, fix, risk)
_CATALOG: tuple[tuple[str, str, Severity, str, tuple[str, ...], str, str], ...] = (
    (
        "P001",
        "data-starvation",
        _H,
        "Compute waits for data",
        _PROF,
        "Raise DataLoader num_workers (try 4, then 8), enable pin_memory and persistent_workers, move heavy "
        "per-item work out of __getitem__ or cache it.",
        "More workers use more host RAM and CPU; persistent workers keep that memory between epochs.",
    ),
    (
        "P002",
        "unbatched-inference",
        _H,
        "Inference runs one sample at a time",
        _PROF,
        "Stack samples into batches (torch.stack / DataLoader batch_size) and call the model once per batch.",
        "A larger batch raises per-request latency and peak memory.",
    ),
    (
        "P003",
        "grad-in-inference",
        _M,
        "Autograd is on during inference",
        _PROF,
        "Wrap inference in torch.inference_mode() (or torch.no_grad()).",
        "Tensors made under inference_mode cannot be used later in autograd.",
    ),
    (
        "P004",
        "train-mode-inference",
        _M,
        "Model is in train() mode during inference",
        _PROF,
        "Call model.eval() before inference (dropout and batch-norm behave differently in train mode).",
        "None for inference; remember model.train() before resuming training.",
    ),
    (
        "P005",
        "host-sync-in-loop",
        _M,
        "Host-device syncs inside the hot loop",
        _PROF,
        "Keep values on the device inside the loop; call .item()/.cpu()/.tolist() once after it, or log every N steps.",
        "Less frequent logging shows progress later.",
    ),
    (
        "P006",
        "model-reloaded",
        _H,
        "Model is built or loaded repeatedly",
        _PROF,
        "Load the model once at start-up (module level or a startup hook) and reuse it.",
        "Start-up takes longer and the process holds the model's memory for its lifetime.",
    ),
    (
        "P007",
        "memory-growth",
        _H,
        "Memory grows every step",
        _PROF,
        "Store .detach().cpu() or .item() of outputs/losses instead of tensors that keep their graph.",
        "Detached values can no longer be backpropagated through.",
    ),
    (
        "P008",
        "cold-start",
        _L,
        "First steps are much slower than steady state",
        _PROF,
        "Warm up before measuring or serving: run a few dummy batches at start-up.",
        "Warm-up adds start-up time.",
    ),
    (
        "P009",
        "reduced-precision-available",
        _M,
        "fp32 matmuls where bf16/TF32 would do",
        _PROF,
        "Use torch.autocast(device_type, dtype=torch.bfloat16) or torch.backends.cuda.matmul.allow_tf32 = True.",
        "Autocast and TF32 can change numerical results; validate accuracy.",
    ),
    (
        "P010",
        "pageable-h2d-copy",
        _M,
        "Host-to-device copies from pageable memory",
        _PROF,
        "Use DataLoader(pin_memory=True) and .to(device, non_blocking=True).",
        "Pinned memory is locked host RAM; too much of it starves the OS.",
    ),
    (
        "P011",
        "dataloader-config",
        _L,
        "DataLoader configuration leaves throughput on the table",
        _PROF,
        "Set num_workers > 0, persistent_workers=True and a prefetch_factor suited to item time.",
        "More workers use more host RAM and CPU.",
    ),
    (
        "P012",
        "python-loop-over-tensor",
        _M,
        "Python loop over tensor elements",
        _PROF,
        "Replace the element loop with a vectorised tensor operation.",
        "Vectorised code may use more temporary memory.",
    ),
    (
        "P013",
        "slow-stage",
        _M,
        "One stage dominates step time",
        _PROF,
        "Optimise or move the dominant stage off the critical path.",
        "Depends on the stage.",
    ),
    (
        "P014",
        "gpu-underutilized",
        _M,
        "GPU is idle much of the time",
        _PROF,
        "Feed the GPU faster: larger batches, more loader workers, CUDA graphs or torch.compile for launch-bound code.",
        "Larger batches raise latency and memory.",
    ),
    (
        "P015",
        "small-batch",
        _L,
        "Batch size is small for this model",
        _PROF,
        "Raise the batch size while latency and memory allow.",
        "A larger batch raises per-request latency and peak memory; training may need a new learning rate.",
    ),
    (
        "S001",
        "serialized-requests",
        _H,
        "Requests are served one at a time",
        _SVC,
        "Move blocking work off the event loop (def endpoint, asyncio.to_thread, run_in_executor) or add workers.",
        "Threads share the GIL; more workers each hold a model copy.",
    ),
    (
        "S002",
        "event-loop-blocked",
        _H,
        "Event loop blocked by synchronous work",
        ("profile",),
        "Run the blocking call in a thread pool (await asyncio.to_thread(fn, ...)) or make the endpoint sync.",
        "Thread pool size limits concurrency; model code must be thread-safe.",
    ),
    (
        "S003",
        "no-backpressure",
        _H,
        "Overload queues without bound instead of rejecting",
        _SVC,
        "Limit in-flight requests (semaphore or server limit) and return 429/503 with Retry-After beyond it.",
        "A concurrency limit turns overload into 429s that clients must retry.",
    ),
    (
        "S004",
        "model-copy-per-worker",
        _M,
        "Each worker process holds its own model copy",
        ("profile",),
        "Use one worker per GPU with async batching, or share weights (preload + fork, or a model server).",
        "Fewer workers means less CPU parallelism for pre/post-processing.",
    ),
    (
        "S005",
        "cold-start-latency",
        _M,
        "First requests are much slower than the rest",
        _SVC,
        "Load and warm up the model at start-up and gate readiness on it.",
        "Start-up takes longer; readiness must reflect it.",
    ),
    (
        "S006",
        "error-rate",
        _H,
        "Requests fail under load",
        _SVC,
        "See the error classes: fix capacity for 503/timeouts, the client for 4xx, the server for resets.",
        "Depends on the cause.",
    ),
    (
        "S007",
        "client-timeout-too-low",
        _M,
        "Client timeout is below the service's tail latency",
        ("load", "profile", "route"),
        "Raise the timeout above the service's p99 at the expected load, or reduce the tail.",
        "Longer timeouts hold connections and retries longer.",
    ),
    (
        "S008",
        "knee",
        _I,
        "Latency knee: past this load latency rises while throughput does not",
        _SVC,
        "Keep offered load below the knee (autoscale or admission control there), or raise capacity.",
        "Running near the knee leaves little headroom for bursts.",
    ),
    (
        "S009",
        "load-generator-saturated",
        _M,
        "The load generator itself saturated",
        _SVC,
        "Use fewer connections per process, more generator processes, or another machine for the client.",
        "Numbers at saturated points describe the client, not the server.",
    ),
    (
        "R001",
        "router-overhead",
        _H,
        "The router adds significant latency",
        _ROUTE,
        "Scale the router, enable upstream keep-alive and connection pooling, check its CPU and buffering.",
        "Connection pools hold sockets on the backends.",
    ),
    (
        "R002",
        "backend-slow",
        _M,
        "Backends are slow; the router is not the problem",
        _ROUTE,
        "Diagnose the backend (infradoctor profile/load against it directly).",
        "None from the router side.",
    ),
    (
        "R003",
        "unhealthy-backend",
        _H,
        "One backend's errors or latency stand out",
        _ROUTE,
        "Drain or restart that backend; enable outlier detection / passive health checks.",
        "Ejecting a backend raises load on the others.",
    ),
    (
        "R004",
        "uneven-distribution",
        _M,
        "Requests are unevenly distributed across backends",
        ("route",),
        "Use least-request / power-of-two-choices balancing, recycle long-lived keep-alive connections.",
        "Least-request needs accurate in-flight counts at the router.",
    ),
    (
        "R005",
        "retry-amplification",
        _H,
        "Retries multiply backend load",
        _ROUTE,
        "Use a retry budget (e.g. 20%), retry only idempotent requests with jittered backoff, honour Retry-After.",
        "Fewer retries surface more transient errors to clients.",
    ),
    (
        "R006",
        "no-healthy-upstream",
        _C,
        "The router had no healthy upstream",
        _ROUTE,
        "Check why backends fail health checks (crashing, still loading the model); fix readiness probes.",
        "None.",
    ),
    (
        "R007",
        "upstream-connect-error",
        _H,
        "The router cannot connect to or loses an upstream",
        _ROUTE,
        "Check the backend is listening and not overloaded; align keep-alive timeouts (backend > router).",
        "None.",
    ),
    (
        "R008",
        "upstream-timeout",
        _H,
        "The router times out waiting for an upstream",
        _ROUTE,
        "Raise the router timeout above the backend's p99, or reduce backend latency.",
        "Longer timeouts hold router connections longer under overload.",
    ),
    (
        "R009",
        "router-queueing",
        _M,
        "Requests queue inside the router",
        ("logs",),
        "Raise backend maxconn/capacity or add backends; shed load early.",
        "More in-flight requests per backend raise its latency.",
    ),
    (
        "R010",
        "health-check-mismatch",
        _H,
        "Backend reports healthy while its predictions fail",
        ("route",),
        "Make the health check exercise the model (or /v1/models readiness), not just the process.",
        "Deeper health checks cost backend capacity.",
    ),
    (
        "R011",
        "cold-backend",
        _M,
        "A backend is slow on its first requests",
        ("route",),
        "Use slow-start (Envoy slow_start_window, HAProxy slowstart) and readiness gated on model load.",
        "Slow-start delays full capacity of new backends.",
    ),
    (
        "R012",
        "deadline-exceeded",
        _H,
        "Requests exceed their deadline",
        ("logs",),
        "Find the slow hop from per-stage timing; raise deadlines only if the work legitimately needs it.",
        "Longer deadlines hide slowness.",
    ),
    (
        "N001",
        "gpu-xid",
        _H,
        "GPU Xid errors in the kernel log",
        ("node", "logs"),
        "Act per Xid code: application errors -> fix/restart the app; hardware errors -> reset GPU, reboot, drain.",
        "Reset and reboot interrupt every job on the GPU/node.",
    ),
    (
        "N002",
        "gpu-ecc",
        _H,
        "GPU ECC errors or pending row remaps",
        _NODE,
        "Pending remap: reset the GPU when idle. Remap failure or retired-page exhaustion: drain and RMA.",
        "Reset interrupts jobs on that GPU.",
    ),
    (
        "N003",
        "gpu-throttling",
        _M,
        "GPU clocks are throttled",
        _NODE,
        "Thermal: check cooling and airflow; power: check power cap and PSU; HW slowdown: inspect the board.",
        "None.",
    ),
    (
        "N004",
        "gpu-memory-pressure",
        _M,
        "GPU memory is nearly full",
        _NODE,
        "Reduce batch size or activation memory (checkpointing, reduced precision), or free other processes.",
        "Smaller batches lower throughput.",
    ),
    (
        "N005",
        "gpu-contention",
        _M,
        "Several processes share a GPU",
        _NODE,
        "Give each job its own GPU (CUDA_VISIBLE_DEVICES) or use MIG/MPS deliberately.",
        "Fewer jobs per node.",
    ),
    (
        "N006",
        "host-memory-pressure",
        _H,
        "Host memory is nearly exhausted or swapping",
        ("node", "logs"),
        "Reduce worker count or dataset caching; add RAM or move work to another node.",
        "Fewer workers lower throughput.",
    ),
    (
        "N007",
        "cpu-saturated",
        _M,
        "CPU is saturated",
        _NODE,
        "Find the busy processes; reduce threads (OMP_NUM_THREADS, torch.set_num_threads) or move work.",
        "None.",
    ),
    (
        "N008",
        "disk-full",
        _H,
        "A disk in use is nearly full",
        _NODE,
        "Free space (old checkpoints, logs, caches) or grow the volume.",
        "Deleting checkpoints loses restart points.",
    ),
    (
        "N009",
        "socket-exhaustion",
        _M,
        "Sockets or ephemeral ports near exhaustion",
        ("node", "logs"),
        "Reuse connections (keep-alive pools); widen net.ipv4.ip_local_port_range; raise the fd limit.",
        "Wider port ranges can collide with listening services.",
    ),
    (
        "N010",
        "pcie-degraded",
        _M,
        "GPU PCIe link runs below its maximum",
        _NODE,
        "Reseat the card or riser, check BIOS slot settings; an idle GPU may downshift generation (check under load).",
        "Reseating needs the node drained.",
    ),
    (
        "N011",
        "gpu-oom",
        _H,
        "CUDA out of memory",
        ("logs", "profile"),
        "Lower batch size, use reduced precision or activation checkpointing; check for memory growth (P007).",
        "Smaller batches lower throughput.",
    ),
    (
        "N012",
        "gpu-not-visible",
        _H,
        "A GPU is expected but not visible",
        _NODE,
        "Check the driver (nvidia-smi), CUDA_VISIBLE_DEVICES, container runtime device mounts.",
        "None.",
    ),
    (
        "C001",
        "model-load-in-handler",
        _H,
        "Model built or loaded inside a request handler",
        _SCAN,
        "Load the model once at start-up (module level or lifespan/startup hook) and reuse it in the handler.",
        "Start-up takes longer.",
    ),
    ("C002", "model-load-in-loop", _H, "Model loaded inside a loop", _SCAN, "Hoist the load out of the loop.", "None."),
    (
        "C003",
        "blocking-call-in-async",
        _H,
        "Blocking call inside async def",
        _SCAN,
        "Await asyncio.to_thread(fn, ...) or loop.run_in_executor, or make the endpoint a plain def.",
        "Thread pool size limits concurrency.",
    ),
    (
        "C004",
        "missing-inference-mode",
        _M,
        "Model inference without no_grad/inference_mode",
        _SCAN,
        "Wrap inference in torch.inference_mode() (or decorate the function with it).",
        "Tensors made under inference_mode cannot be used in autograd later.",
    ),
    (
        "C005",
        "missing-eval",
        _M,
        "Loaded model never switched to eval()",
        _SCAN,
        "Call model.eval() after loading weights for inference.",
        "None for inference.",
    ),
    (
        "C006",
        "sync-in-loop",
        _M,
        "Host sync (.item()/.cpu()/...) inside a loop",
        _SCAN,
        "Accumulate on the device and convert once after the loop.",
        "Progress shows later.",
    ),
    (
        "C007",
        "per-sample-loop",
        _M,
        "Model called per sample in a loop",
        _SCAN,
        "Batch the samples and call the model once per batch.",
        "Larger batches use more memory.",
    ),
    (
        "C008",
        "accumulate-device-tensors",
        _M,
        "Model outputs/losses kept in a list with their graph",
        _SCAN,
        "Append .detach().cpu() or .item() instead.",
        "Detached values cannot be backpropagated.",
    ),
    (
        "C009",
        "dataloader-workers",
        _L,
        "DataLoader without worker processes",
        _SCAN,
        "Set num_workers (e.g. 4) and persistent_workers=True.",
        "More workers use more RAM.",
    ),
    (
        "C010",
        "dataloader-pin-memory",
        _L,
        "DataLoader feeding CUDA without pin_memory",
        _SCAN,
        "Set pin_memory=True.",
        "Pinned memory is locked host RAM.",
    ),
    (
        "C011",
        "blocking-h2d",
        _L,
        "Copy of pinned data to CUDA without non_blocking",
        _SCAN,
        "Use .to('cuda', non_blocking=True).",
        "Do not read the tensor on the host before a sync.",
    ),
    (
        "C012",
        "empty-cache-as-fix",
        _L,
        "torch.cuda.empty_cache() in a loop or handler",
        _SCAN,
        "Remove it; find what holds memory instead (P007). It slows every call and frees nothing live.",
        "None.",
    ),
    (
        "C013",
        "multi-worker-model-copy",
        _M,
        "Several server workers each load a GPU model",
        _SCAN,
        "Use one worker per GPU with batching, or a model server.",
        "Less CPU parallelism.",
    ),
    (
        "C014",
        "unsafe-torch-load",
        _M,
        "torch.load without weights_only=True",
        _SCAN,
        "Pass weights_only=True (the default from torch 2.6).",
        "Checkpoints that pickle custom objects need torch.serialization.add_safe_globals.",
    ),
)

REGISTRY: Mapping[str, RuleSpec] = MappingProxyType(
    {
        code: RuleSpec(code, name, code[0], sev, title, cmds, fix, risk)
        for code, name, sev, title, cmds, fix, risk in _CATALOG
    }
)
"""Every code in the catalog, by code."""

_BY_NAME = {spec.name: spec for spec in REGISTRY.values()}


class UnknownCodeError(KeyError):
    """A code or name that is not in the catalog."""


def spec(code_or_name: str) -> RuleSpec:
    """The catalog entry for a code (``P001``) or a name (``data-starvation``)."""
    key = code_or_name.strip()
    found = REGISTRY.get(key.upper()) or _BY_NAME.get(key.lower())
    if found is None:
        raise UnknownCodeError(f"unknown finding code or name {code_or_name!r}")
    return found


def make_finding(
    code: str,
    title: str,
    evidence: Mapping[str, Any] | None = None,
    *,
    severity: Severity | None = None,
    fix: str | None = None,
    risk: str | None = None,
    location: Location | None = None,
    impact: float | None = None,
) -> Finding:
    """A finding for a registered code, with the catalog's name, default severity, fix and risk filled in.

    Raises:
        UnknownCodeError: the code is not registered (emitting an unregistered code is a bug).
    """
    entry = REGISTRY.get(code)
    if entry is None:
        raise UnknownCodeError(f"finding code {code!r} is not registered in infradoctor.findings")
    return Finding(
        code=code,
        name=entry.name,
        severity=severity or entry.severity,
        title=title,
        evidence=dict(evidence or {}),
        fix=fix if fix is not None else entry.fix,
        risk=risk if risk is not None else entry.risk,
        location=location,
        impact=impact,
    )


def rank_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Most important first: by severity, then by explained share of run time, then by code."""
    return sorted(findings, key=lambda f: (-f.severity.rank, -(f.impact or 0.0), f.code))


# Packages whose ``rules`` subpackage holds one module per rule, each with ``CODE`` (or ``CODES``) and a docstring
# with the sections What it detects / Why it matters / How it is measured / Fix.
RULE_PACKAGES = ("node", "profile", "load", "route", "logs", "scan", "serve")
DOC_SECTIONS = ("What it detects", "Why it matters", "How it is measured", "Fix")


def iter_rule_modules() -> Iterable[ModuleType]:
    """Import and yield every rule module of every command package that exists."""
    for pkg_name in RULE_PACKAGES:
        try:
            pkg = importlib.import_module(f"infradoctor.{pkg_name}.rules")
        except ModuleNotFoundError:
            continue
        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
            if info.name.startswith("_"):
                continue
            yield importlib.import_module(f"{pkg.__name__}.{info.name}")


def rule_codes(module: ModuleType) -> tuple[str, ...]:
    """The codes a rule module declares (``CODE = "P001"`` or ``CODES = ("R006", ...)``)."""
    codes = getattr(module, "CODES", None)
    if codes is None:
        code = getattr(module, "CODE", None)
        codes = (code,) if code else ()
    return tuple(str(c) for c in codes)


def rule_docs() -> dict[str, str]:
    """Docstring of the rule module for each code that has one."""
    docs: dict[str, str] = {}
    for module in iter_rule_modules():
        for code in rule_codes(module):
            docs.setdefault(code, (module.__doc__ or "").strip())
    return docs
