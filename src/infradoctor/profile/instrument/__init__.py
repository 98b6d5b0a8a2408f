"""In-process instrumentation of a PyTorch workload: runs inside the profiled child, stdlib and torch only.

Mechanisms (chosen from measured overheads, see the profile README section):

- top-level ``nn.Module`` discovery with global forward hooks, dropped after a quiet spell and re-armed when a
  Module is built, unpickled or deep-copied or weights are loaded, then a wrapper on each top-level instance's
  ``forward``; every call is counted at its user call site (``recorder``): grad mode, inference mode,
  ``.training``, batch size (in the model's batch dimension: 1 for sequence-first RNNs and transformers), time,
  whether it was fed by the previous call (recurrent state, a context one token longer), and, in grad mode, the
  fate of its autograd graph (a marker in the output nodes' ``metadata``: used by a backward, freed unused, or
  kept alive unused across later calls). Modules called inside a dataset fetch are transforms, not models;
- patched ``torch.autograd.backward``/``grad`` and global optimizer step hooks (``patches.autograd``);
- patched Tensor sync methods (``item``, ``tolist``, ``cpu``, ``numpy``, ``__bool__``, ``__iter__``, ...), counted
  per user call site (``patches.sync``);
- a timer around ``_BaseDataLoaderIter.__next__`` (data wait), the DataLoader's configuration, dataset fetch time
  (also inside worker processes) (``patches.data``);
- patched ``torch.load``, ``Module.load_state_dict``, ``from_pretrained`` and Module construction call sites
  (``patches.modules``); host-to-device copies on GPU (``patches.h2d``);
- per-step memory (``/proc/self/statm`` and glibc ``mallinfo2``, at most 20 reads/s; CUDA allocator stats on GPU);
- sampled survival of top-level forward outputs (weakref finalizers, a bounded budget) and, once memory growth is
  suspected, allocation sites sampled with a TorchDispatchMode over single steps (<= 2% of run time): the leak site
  (``patches.allocations``).

Evidence goes to files in the events folder: ``<pid>.steps.jsonl`` (one JSON array of steps per flush) and
``<pid>.state.json`` (aggregates, atomically replaced about once a second and at exit), ``<pid>.worker.json`` from
DataLoader workers. A failure inside the instrumentation is reported once on stderr and never breaks the workload.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from infradoctor.profile.instrument import state
from infradoctor.profile.instrument.importhook import ImportHook
from infradoctor.profile.instrument.recorder import MAX_STEPS_ENV, NO_ALLOC_SAMPLING_ENV, Recorder
from infradoctor.profile.instrument.records import SyncSiteStats
from infradoctor.profile.instrument.state import EVENTS_DIR_ENV

START_ERROR_FILE = "start-error.txt"
"""File the runner writes into the events folder when the program cannot start (e.g. ``-m`` names no module)."""
STOP_MARKER = "stop-requested"
"""File the launcher writes into the events folder before it stops the workload (its SIGINT is then no error)."""

__all__ = [
    "EVENTS_DIR_ENV", "MAX_STEPS_ENV", "NO_ALLOC_SAMPLING_ENV", "START_ERROR_FILE", "STOP_MARKER", "Recorder",
    "SyncSiteStats", "activate", "activate_worker_support", "on_torch_imported", "recorder",
]


def on_torch_imported(torch: Any) -> None:
    """Install every torch patch into this process (idempotent)."""
    from infradoctor.profile.instrument.patches import autograd, data, h2d, modules, sync

    state.torch = torch
    rec = state.recorder
    if rec is None or rec.torch_imported:
        return
    rec.torch_imported = True
    rec.torch_version = str(getattr(torch, "__version__", "?"))
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    rec.library_dirs = (*rec.library_dirs, torch_dir + os.sep)
    rec.internal_code.clear()
    try:
        rec.cuda = bool(torch.cuda.is_available())
    except Exception as exc:  # noqa: BLE001
        state.warn_once("cuda", exc)
    for name, patch in (
        ("tensor.sync", sync.install),
        ("autograd", autograd.install),
        ("optimizer", autograd.install_optimizer),
        ("dataloader", data.install),
        ("load", modules.install_loads),
        ("module.init", modules.install_construction),
    ):
        try:
            patch(rec, torch)
        except Exception as exc:  # noqa: BLE001
            state.warn_once(f"install.{name}", exc)
    if rec.cuda:
        try:
            h2d.install(rec, torch)
        except Exception as exc:  # noqa: BLE001
            state.warn_once("install.h2d", exc)
    try:
        rec.arm_discovery()
    except Exception as exc:  # noqa: BLE001
        state.warn_once("install.discovery", exc)
    transformers = sys.modules.get("transformers.modeling_utils")
    if transformers is not None:
        on_transformers_imported(transformers)


def on_transformers_imported(module: Any) -> None:
    """Time ``PreTrainedModel.from_pretrained`` as weight loading."""
    rec = state.recorder
    patch = getattr(rec, "patch_from_pretrained", None)
    cls = getattr(module, "PreTrainedModel", None)
    if patch is not None and cls is not None:
        try:
            patch(cls)
        except Exception as exc:  # noqa: BLE001
            state.warn_once("install.from_pretrained", exc)


def activate(events_dir: str, role: str = "main", argv: list[str] | None = None) -> Recorder:
    """Start recording in this process: torch patches now if torch is loaded, else when it is imported."""
    rec = Recorder(events_dir, role, list(argv if argv is not None else sys.argv))
    state.recorder = rec
    callbacks: dict[str, Callable[[Any], None]] = {"transformers.modeling_utils": on_transformers_imported}
    if "torch" in sys.modules:
        on_torch_imported(sys.modules["torch"])
    else:
        callbacks["torch"] = on_torch_imported
    sys.meta_path.insert(0, ImportHook(callbacks))  # type: ignore[arg-type]
    rec.flush()
    rec.start_writer()
    atexit.register(rec.finish)
    _flush_on_sigterm(rec)
    return rec


def _flush_on_sigterm(rec: Recorder) -> None:
    """With the default SIGTERM disposition, write the evidence first and then die of SIGTERM as before."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        with contextlib.suppress(Exception):
            rec.finish(128 + signum)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGTERM, on_sigterm)


def activate_worker_support() -> None:
    """In a process that is not the profiled main process (e.g. a spawned DataLoader worker): time dataset fetches."""
    from infradoctor.profile.instrument.patches import data

    def install(torch: Any) -> None:
        data.install_fetchers()

    if "torch" in sys.modules:
        install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, ImportHook({"torch": install}))  # type: ignore[arg-type]


def recorder() -> Recorder | None:
    """The active recorder of this process, if any."""
    return state.recorder
