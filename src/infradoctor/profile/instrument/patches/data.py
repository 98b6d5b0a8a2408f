"""Data loading: the DataLoader's configuration and call site, waits, dataset fetches.

Waits in ``__next__`` mark steps; dataset fetches are timed in this process and in worker processes. Modules called
inside a fetch are transforms, not models.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from infradoctor.profile.instrument import state
from infradoctor.profile.instrument.records import batch_size

if TYPE_CHECKING:
    from infradoctor.profile.instrument.recorder import Recorder

WORKER_FLUSH_INTERVAL_S = 0.5
"""DataLoader workers end with os._exit: they write their evidence this often and in a finally."""


def loader_config(loader: Any) -> dict[str, Any]:
    """A DataLoader's settings, as plain values."""
    def get(name: str) -> Any:
        value = getattr(loader, name, None)
        return value if isinstance(value, (int, float, bool, str)) or value is None else str(value)

    dataset = getattr(loader, "dataset", None)
    length: int | None = None
    with contextlib.suppress(Exception):
        length = len(dataset)  # type: ignore[arg-type]
    return {
        "num_workers": get("num_workers"),
        "pin_memory": get("pin_memory"),
        "persistent_workers": get("persistent_workers"),
        "prefetch_factor": get("prefetch_factor"),
        "batch_size": get("batch_size"),
        "dataset": type(dataset).__name__,
        "dataset_len": length,
        "multiprocessing_context": str(getattr(loader, "multiprocessing_context", None) or "") or None,
    }


def install(rec: Recorder, torch: Any) -> None:
    """Patch the DataLoader and its iterators."""
    from torch.utils.data import dataloader as dl_mod

    clock = rec.clock
    loader_init = dl_mod.DataLoader.__init__

    @functools.wraps(loader_init)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        loader_init(self, *args, **kwargs)
        try:
            frame = rec.user_frame(sys._getframe(1))
            entry = loader_config(self)
            entry.update(
                id=id(self),
                file=frame.f_code.co_filename if frame else None,
                line=frame.f_lineno if frame else None,
                iterators=0,
                batches=0,
                wait_s=0.0,
                first_batch_waits=[],
            )
            rec.dataloaders[id(self)] = entry
        except Exception as exc:  # noqa: BLE001
            state.warn_once("dataloader.init", exc)

    dl_mod.DataLoader.__init__ = init  # type: ignore[method-assign]

    loader_iter = dl_mod.DataLoader.__iter__

    @functools.wraps(loader_iter)
    def iterate(self: Any) -> Any:
        it = loader_iter(self)
        try:
            entry = rec.dataloaders.get(id(self))
            if entry is None:
                entry = loader_config(self) | {"id": id(self), "file": None, "line": None, "iterators": 0,
                                               "batches": 0, "wait_s": 0.0, "first_batch_waits": []}
                rec.dataloaders[id(self)] = entry
            entry["iterators"] += 1
            it._infradoctor_entry = entry  # type: ignore[attr-defined]
            it._infradoctor_first = True  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001
            state.warn_once("dataloader.iter", exc)
        return it

    dl_mod.DataLoader.__iter__ = iterate  # type: ignore[method-assign]

    next_orig = dl_mod._BaseDataLoaderIter.__next__

    @functools.wraps(next_orig)
    def next_batch(self: Any) -> Any:
        t0 = clock()
        try:
            rec.boundary("dataloader", t0, before=True)
        except Exception as exc:  # noqa: BLE001
            state.warn_once("dataloader.next", exc)
        try:
            out = next_orig(self)
        except StopIteration:
            rec.step.data_wait += clock() - t0
            raise
        dt = clock() - t0
        try:
            step = rec.step
            step.data_wait += dt
            step.batches += 1
            step.samples += batch_size(out) if not isinstance(out, torch.Tensor) or out.dim() else 1
            entry = getattr(self, "_infradoctor_entry", None)
            if entry is not None:
                entry["batches"] += 1
                entry["wait_s"] += dt
                if getattr(self, "_infradoctor_first", False):
                    self._infradoctor_first = False
                    if len(entry["first_batch_waits"]) < 100:
                        entry["first_batch_waits"].append(dt)
        except Exception as exc:  # noqa: BLE001
            state.warn_once("dataloader.next", exc)
        return out

    dl_mod._BaseDataLoaderIter.__next__ = next_batch  # type: ignore[method-assign]
    install_fetchers()


def install_fetchers() -> None:
    """Time dataset fetches (items + collate) in this process and, after fork or spawn, in worker processes."""
    from torch.utils.data._utils import fetch as fetch_mod
    from torch.utils.data._utils import worker as worker_mod

    local = state.local
    for cls in (fetch_mod._MapDatasetFetcher, fetch_mod._IterableDatasetFetcher):
        orig = cls.fetch
        if getattr(orig, "__infradoctor__", False):
            continue

        def make(orig: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(orig)
            def fetch(self: Any, possibly_batched_index: Any) -> Any:
                t0 = time.perf_counter()
                c0 = time.thread_time()
                outer = getattr(local, "in_fetch", False)
                local.in_fetch = True
                try:
                    out = orig(self, possibly_batched_index)
                finally:
                    local.in_fetch = outer
                try:
                    record_fetch(time.perf_counter() - t0, time.thread_time() - c0, possibly_batched_index)
                except Exception as exc:  # noqa: BLE001
                    state.warn_once("dataloader.fetch", exc)
                return out

            fetch.__infradoctor__ = True  # type: ignore[attr-defined]
            return fetch

        cls.fetch = make(orig)  # type: ignore[method-assign]

    loop = worker_mod._worker_loop
    if not getattr(loop, "__infradoctor__", False):

        @functools.wraps(loop)
        def worker_loop(*args: Any, **kwargs: Any) -> Any:
            try:
                return loop(*args, **kwargs)
            finally:
                write_worker(force=True)

        worker_loop.__infradoctor__ = True  # type: ignore[attr-defined]
        worker_mod._worker_loop = worker_loop


_worker_stats: dict[str, Any] = {"pid": None, "calls": 0, "items": 0, "time_s": 0.0, "cpu_s": 0.0,
                                 "last_write": 0.0}


def record_fetch(dt: float, cpu: float, index: Any) -> None:
    """One fetch: its wall time and the CPU time of the fetching thread (the rest waited: I/O, sleeps, locks)."""
    items = len(index) if isinstance(index, (list, tuple)) else 1
    rec = state.recorder
    if rec is not None and rec.pid == os.getpid():
        rec.fetch["calls"] += 1
        rec.fetch["items"] += items
        rec.fetch["time_s"] += dt
        rec.fetch["cpu_s"] = rec.fetch.get("cpu_s", 0.0) + cpu
        return
    stats = _worker_stats
    if stats["pid"] != os.getpid():
        stats.update(pid=os.getpid(), calls=0, items=0, time_s=0.0, cpu_s=0.0, last_write=time.monotonic())
    stats["calls"] += 1
    stats["items"] += items
    stats["time_s"] += dt
    stats["cpu_s"] += cpu
    write_worker(force=False)


def write_worker(force: bool) -> None:
    stats = _worker_stats
    events_dir = os.environ.get(state.EVENTS_DIR_ENV)
    if not events_dir or stats["pid"] != os.getpid():
        return
    now = time.monotonic()
    if not force and now - stats["last_write"] < WORKER_FLUSH_INTERVAL_S:
        return
    stats["last_write"] = now
    path = os.path.join(events_dir, f"{os.getpid()}.worker.json")
    with contextlib.suppress(OSError):
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump({"pid": os.getpid(), "ppid": os.getppid(), "calls": stats["calls"], "items": stats["items"],
                       "time_s": stats["time_s"], "cpu_s": stats["cpu_s"]}, fh)
        os.replace(path + ".tmp", path)
