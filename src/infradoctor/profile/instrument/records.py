"""The recorder's in-memory records: memory reads, steps, host-read sites, models and their call sites.

Runs inside the profiled child: standard library only (torch is reached through ``state.torch``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import weakref
from types import CodeType
from typing import Any

from infradoctor.profile.instrument import state

KEEP_SPAN = 3
"""An autograd graph that no backward used and that outlived this many later calls at its site was kept
(appended to a list, summed into a running total): the graph and the activations it saves stay in memory."""
MAX_CALL_SITES = 64
"""Call sites kept per model (a program calling one model from more lines lumps the rest into the last)."""
MEASURE_KEPT_FROM = 8
"""Kept graphs alive at once from which the memory they hold is read (at 8, 16, 32, ... alive)."""


class Memory:
    """Cheap process memory reads: RSS from /proc/self/statm, heap from glibc mallinfo2."""

    def __init__(self) -> None:
        self.page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.fd: int | None = None
        with contextlib.suppress(OSError):
            self.fd = os.open("/proc/self/statm", os.O_RDONLY)
        self.mallinfo2: Any = None
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None)
            fn = libc.mallinfo2

            class _MallInfo2(ctypes.Structure):
                _fields_ = [  # noqa: RUF012 - ctypes layout
                    (name, ctypes.c_size_t)
                    for name in (
                        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                        "fordblks", "keepcost",
                    )
                ]

            fn.restype = _MallInfo2
            fn.argtypes = []
            fn()
            self.mallinfo2 = fn

    def rss(self) -> int | None:
        if self.fd is None:
            return None
        try:
            fields = os.pread(self.fd, 128, 0).split()
            return int(fields[1]) * self.page
        except (OSError, IndexError, ValueError):
            return None

    def heap(self) -> int | None:
        if self.mallinfo2 is None:
            return None
        info = self.mallinfo2()
        return int(info.uordblks + info.hblkhd)


class Step:
    """The step being recorded."""

    __slots__ = (
        "t0", "data_wait", "h2d", "forward", "backward", "optimizer", "sync", "load", "samples", "forwards",
        "backwards", "syncs", "batches", "active_sites", "alloc_sampled",
    )

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.data_wait = 0.0
        self.h2d = 0.0
        self.forward = 0.0
        self.backward = 0.0
        self.optimizer = 0.0
        self.sync = 0.0
        self.load = 0.0
        self.samples = 0
        self.forwards = 0
        self.backwards = 0
        self.syncs = 0
        self.batches = 0
        self.active_sites: list[SyncSiteStats] = []
        self.alloc_sampled = False


class SyncSiteStats:
    """A user line that reads tensor values on the host."""

    __slots__ = ("kind", "file", "line", "function", "calls", "time", "span", "elements", "steps", "first", "last")

    def __init__(self, kind: str, code: CodeType, line: int) -> None:
        self.kind = kind
        self.file = code.co_filename
        self.line = line
        self.function = code.co_name
        self.calls = 0
        self.time = 0.0
        self.span = 0.0
        self.elements = 0
        self.steps = 0
        self.first = -1.0
        self.last = -1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "calls": self.calls,
            "time_s": self.time,
            "span_s": self.span,
            "elements": self.elements,
            "steps": self.steps,
        }


class CallSiteStats:
    """One user line that calls a model: how it was called, and what became of the autograd graphs it made."""

    __slots__ = (
        "file", "line", "function", "calls", "time", "grad_calls", "graphs", "used", "dead_unused", "kept",
        "max_span", "live", "live_max", "heap_start", "held_bytes", "train_calls", "train_inference",
        "train_unused", "train_live", "fallback_unused", "batches", "sequential", "first", "last", "retained_sampled",
        "retained_freed",
    )

    def __init__(self, file: str, line: int, function: str) -> None:
        self.file = file
        self.line = line
        self.function = function
        self.calls = 0
        self.time = 0.0
        self.grad_calls = 0
        self.graphs = 0
        self.used = 0
        self.dead_unused = 0
        self.kept = 0
        self.max_span = 0
        self.live = 0
        self.live_max = 0
        self.heap_start: int | None = None
        self.held_bytes: int | None = None
        self.train_calls = 0
        self.train_inference = 0
        self.train_unused = 0
        self.train_live = 0
        """Graphs made in train mode that are alive and not yet used by a backward."""
        self.fallback_unused = 0
        self.batches: dict[int, int] = {}
        self.sequential = 0
        self.first = -1.0
        self.last = -1.0
        self.retained_sampled = 0
        self.retained_freed = 0

    def unused(self, pending: int = 0) -> int:
        """Grad-mode calls whose graph no backward used.

        Freed unused, still alive unused, or (where no graph could be followed) called again before any backward.
        """
        alive_unused = max(0, self.graphs - self.used - self.dead_unused)
        return self.dead_unused + alive_unused + self.fallback_unused + pending

    def to_json(self, pending: int = 0, pending_training: int = 0) -> dict[str, Any]:
        alive_unused = max(0, self.graphs - self.used - self.dead_unused)
        return {
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "calls": self.calls,
            "time_s": self.time,
            "grad_calls": self.grad_calls,
            "graphs": self.graphs,
            "used_graphs": self.used,
            "unused_grad_calls": self.unused(pending),
            # graphs still alive at the end, unused, outlived later calls too: kept until the end
            "kept_graphs": self.kept + (alive_unused if alive_unused >= KEEP_SPAN else 0),
            "kept_span_calls": self.max_span,
            "kept_peak": self.live_max,
            "kept_held_bytes": self.held_bytes,
            "train_mode_calls": self.train_calls,
            "train_mode_inference_calls": self.train_inference + self.train_unused + self.train_live
            + pending_training,
            "batch_sizes": {str(k): v for k, v in self.batches.items()},
            "sequential_calls": self.sequential,
            "first_s": self.first,
            "last_s": self.last,
            "retained_sampled": self.retained_sampled,
            "retained_alive": self.retained_sampled - self.retained_freed,
        }


class Graph:
    """A marker on the autograd nodes of one call's outputs (in their ``metadata``).

    It learns whether a backward ran through them (a node hook) and, when the nodes are freed, whether the graph
    was ever used and how many later calls it outlived.
    """

    __slots__ = ("site", "index", "training", "fired", "attached")

    def __init__(self, site: CallSiteStats, index: int, training: bool) -> None:
        self.site = site
        self.index = index
        self.training = training
        self.fired = False
        self.attached = False

    def fire(self, grad_inputs: Any, grad_outputs: Any) -> None:
        """Node post-hook: a backward ran through this call's output."""
        if not self.fired:
            self.fired = True
            site = self.site
            site.used += 1
            site.live -= 1
            if self.training:
                site.train_live -= 1

    def __del__(self) -> None:
        if not self.attached or self.fired:
            return
        try:
            site = self.site
            site.live -= 1
            site.dead_unused += 1
            if self.training:
                site.train_unused += 1
                site.train_live -= 1
            span = site.calls - self.index
            if span >= KEEP_SPAN:
                site.kept += 1
            if span > site.max_span:
                site.max_span = span
        except Exception:  # noqa: BLE001 - a finaliser must never raise (interpreter shutdown)
            return


class ModuleStats:
    """One model (a top-level module: same class and parameter count), over every instance of it."""

    __slots__ = (
        "key", "cls", "params", "trainable", "mode_layers", "device", "dtype", "batch_dim", "calls", "time",
        "call_sites", "pending", "autocast_calls", "ref", "input_dtypes", "prev_outputs", "prev_length",
    )

    def __init__(self, key: int, module: Any) -> None:
        self.key = key
        self.cls = type(module).__name__
        self.params = 0
        self.trainable = False
        self.mode_layers: list[str] = []
        self.device = "cpu"
        self.dtype = ""
        self.batch_dim = 0
        with contextlib.suppress(Exception):
            for p in module.parameters():
                self.params += int(p.numel())
                self.trainable = self.trainable or bool(p.requires_grad)
                if not self.dtype:
                    self.dtype = str(p.dtype).replace("torch.", "")
                    self.device = p.device.type
            nn = state.torch.nn
            kinds = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._NormBase)
            self.mode_layers = sorted({type(m).__name__ for m in module.modules() if isinstance(m, kinds)})
            self.batch_dim = batch_dimension(module)
        self.calls = 0
        self.time = 0.0
        self.call_sites: dict[tuple[str, int], CallSiteStats] = {}
        self.pending: tuple[CallSiteStats, bool] | None = None
        """A grad-mode call whose graph could not be followed, until a backward or the next call."""
        self.autocast_calls = 0
        self.input_dtypes: dict[str, int] = {}
        self.ref = weakref.ref(module)
        self.prev_outputs: tuple[Any, ...] = ()
        """Weak references to the tensors the last call returned (recurrent state fed back is sequential)."""
        self.prev_length: int | None = None
        """Sequence length of the last call's input (a context one longer each call is autoregressive)."""

    def site(self, file: str, line: int, function: str) -> CallSiteStats:
        key = (file, line)
        site = self.call_sites.get(key)
        if site is None:
            if len(self.call_sites) >= MAX_CALL_SITES:
                return next(reversed(self.call_sites.values()))
            site = self.call_sites[key] = CallSiteStats(file, line, function)
        return site

    def to_json(self) -> dict[str, Any]:
        pending_site, pending_training = self.pending if self.pending is not None else (None, False)
        sites: list[dict[str, Any]] = []
        for site in list(self.call_sites.values()):
            mine = site is pending_site
            sites.append(site.to_json(pending=int(mine), pending_training=int(mine and pending_training)))
        batches: dict[str, int] = {}
        for s in sites:
            for k, v in s["batch_sizes"].items():
                batches[k] = batches.get(k, 0) + v
        retained_sampled = sum(s["retained_sampled"] for s in sites)
        return {
            "id": self.key,
            "class": self.cls,
            "params": self.params,
            "trainable": self.trainable,
            "mode_layers": self.mode_layers,
            "device": self.device,
            "dtype": self.dtype,
            "batch_dim": self.batch_dim,
            "calls": self.calls,
            "time_s": self.time,
            "grad_calls": sum(s["grad_calls"] for s in sites),
            "unused_grad_calls": sum(s["unused_grad_calls"] for s in sites),
            "train_mode_calls": sum(s["train_mode_calls"] for s in sites),
            "train_mode_inference_calls": sum(s["train_mode_inference_calls"] for s in sites),
            "batch_sizes": batches,
            "sites": [{"file": s["file"], "line": s["line"], "calls": s["calls"]} for s in sites],
            "call_sites": sites,
            "autocast_calls": self.autocast_calls,
            "retained_sampled": retained_sampled,
            "retained_alive": sum(s["retained_alive"] for s in sites),
            "input_dtypes": dict(self.input_dtypes),
        }


def batch_dimension(module: Any) -> int:
    """1 for a sequence-first model (an RNN, attention or transformer layer with ``batch_first=False``), else 0."""
    nn = state.torch.nn
    seq_first = (nn.RNNBase, nn.MultiheadAttention, nn.Transformer, nn.TransformerEncoderLayer,
                 nn.TransformerDecoderLayer)
    for sub in module.modules():
        if isinstance(sub, seq_first) and getattr(sub, "batch_first", True) is False:
            return 1
    return 0


def batch_size(value: Any, dim: int = 0) -> int:
    """Size of the batch dimension of the first tensor in a call's first argument; 1 for an unbatched input."""
    tensor_cls = state.torch.Tensor
    if type(value) is tensor_cls or isinstance(value, tensor_cls):  # the common case, first
        ndim = value.dim()
        return int(value.shape[dim]) if ndim >= 2 and ndim > dim else 1
    for _ in range(3):
        if isinstance(value, tensor_cls):
            return int(value.shape[dim]) if value.dim() >= 2 and value.dim() > dim else 1
        if isinstance(value, (list, tuple)) and value:
            value = value[0]
        elif isinstance(value, dict) and value:
            value = next(iter(value.values()))
        else:
            break
    return 1


def first_tensor(value: Any) -> Any:
    """The first tensor in a (nested) argument or output, or None."""
    tensor_cls = state.torch.Tensor
    for _ in range(3):
        if isinstance(value, tensor_cls):
            return value
        if isinstance(value, (list, tuple)) and value:
            value = value[0]
        elif isinstance(value, dict) and value:
            value = next(iter(value.values()))
        else:
            return None
    return None


def shallow_tensors(value: Any, limit: int = 4) -> list[Any]:
    """Tensors at the top of a call's argument or output.

    The value itself, or the first few members of a tuple, list, mapping or plain object (a namespace or dataclass
    of outputs), and of tuples inside those, such as an RNN's ``(h, c)``.
    """
    tensor_cls = state.torch.Tensor
    if isinstance(value, tensor_cls):
        return [value]
    if isinstance(value, dict):
        members = list(value.values())[:limit]
    elif isinstance(value, (list, tuple)):
        members = list(value[:limit])
    elif isinstance(getattr(value, "__dict__", None), dict) and not isinstance(value, state.torch.nn.Module):
        members = list(vars(value).values())[:limit]  # a namespace or dataclass of outputs (loss=..., logits=...)
    else:
        return []
    out: list[Any] = []
    for member in members:
        if isinstance(member, tensor_cls):
            out.append(member)
        elif isinstance(member, (list, tuple)):
            out.extend(m for m in member[:limit] if isinstance(m, tensor_cls))
        if len(out) >= limit:
            break
    return out[:limit]


def sequence_length(value: Any, batch_dim: int) -> int | None:
    """Length of a token sequence input (a 2-D integer tensor: batch x time, or time x batch), else None."""
    tensor = value if isinstance(value, state.torch.Tensor) else first_tensor(value)
    if tensor is None or tensor.dim() != 2 or tensor.is_floating_point():
        return None
    return int(tensor.shape[1 - batch_dim])
