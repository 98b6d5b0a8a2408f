"""Attach a loop-lag monitor to every event loop a process runs, without changing the application.

Used by ``infradoctor profile --load-url``: the profiled server (and each of its worker processes) imports
``infradoctor/profile/inject/sitecustomize.py`` at start-up, which calls :func:`install_from_env`. That wraps
``asyncio``'s ``_set_running_loop`` (which asyncio's and uvloop's ``run_forever`` call in the loop's own thread), so
the first time a loop starts running, a :class:`~infradoctor.serve.looplag.LoopLagMonitor` starts watching it. The
evidence is written to ``<dir>/loop-<pid>.json`` about once a second and at exit.

uvloop looks ``_set_running_loop`` up when it is imported, so this must be installed before uvloop is imported
(sitecustomize runs before the program).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infradoctor.serve.looplag import DEFAULT_INTERVAL_S, DEFAULT_STALL_THRESHOLD_S, LoopLagEvidence, LoopLagMonitor

DIR_ENV = "INFRADOCTOR_SERVE_DIR"
"""Environment variable naming the folder the evidence goes to; nothing is installed where it is unset."""

STALL_ENV = "INFRADOCTOR_SERVE_STALL_S"
"""Optional stall threshold in seconds (default 0.1)."""

WRITE_INTERVAL_S = 1.0
"""Evidence files are rewritten this often while the loop runs."""

_lock = threading.Lock()
_monitor: LoopLagMonitor | None = None
_directory: Path | None = None
_installed = False


def evidence_path(directory: str | os.PathLike[str], pid: int) -> Path:
    """Where the process ``pid`` writes its loop evidence."""
    return Path(directory) / f"loop-{pid}.json"


def _write() -> None:
    monitor, directory = _monitor, _directory
    if monitor is None or directory is None:
        return
    with contextlib.suppress(OSError):
        monitor.write_evidence(evidence_path(directory, os.getpid()))


def _writer(stop: threading.Event) -> None:
    while not stop.wait(WRITE_INTERVAL_S):
        _write()


def _on_loop_running(loop: Any) -> None:
    """Start the monitor on the first loop that runs in this process (called in the loop's thread)."""
    global _monitor
    with _lock:
        if _monitor is not None or loop is None:
            return
        threshold = DEFAULT_STALL_THRESHOLD_S
        with contextlib.suppress(ValueError):
            threshold = float(os.environ.get(STALL_ENV, threshold))
        _monitor = LoopLagMonitor(interval_s=DEFAULT_INTERVAL_S, stall_threshold_s=threshold)
        _monitor.start(loop, thread_id=threading.get_ident())
    stop = threading.Event()
    threading.Thread(target=_writer, args=(stop,), name="infradoctor-loop-writer", daemon=True).start()

    def at_exit() -> None:
        stop.set()
        if _monitor is not None:
            _monitor.stop()
        _write()

    atexit.register(at_exit)


def _wrap(original: Callable[[Any], None]) -> Callable[[Any], None]:
    def _set_running_loop(loop: Any) -> None:
        original(loop)
        if loop is not None and _monitor is None:
            try:
                _on_loop_running(loop)
            except Exception:  # never break the server
                return

    _set_running_loop.__wrapped__ = original  # type: ignore[attr-defined]
    return _set_running_loop


def _forget_parent_monitor() -> None:
    """In a forked child the parent's watchdog thread does not exist: watch the child's own loop afresh."""
    global _monitor, _lock
    _monitor = None
    _lock = threading.Lock()


def install(directory: str | os.PathLike[str]) -> None:
    """Watch the first event loop this process (or a forked child of it) runs; write evidence under ``directory``."""
    global _directory, _installed
    with _lock:
        if _installed:
            return
        _installed = True
        _directory = Path(directory)
    os.register_at_fork(after_in_child=_forget_parent_monitor)
    wrapped = _wrap(asyncio.events._set_running_loop)
    asyncio.events._set_running_loop = wrapped  # type: ignore[assignment]
    asyncio._set_running_loop = wrapped  # type: ignore[attr-defined]


def install_from_env() -> bool:
    """:func:`install` when ``INFRADOCTOR_SERVE_DIR`` is set; True if it was."""
    directory = os.environ.get(DIR_ENV)
    if not directory:
        return False
    install(directory)
    return True


def read_loop_evidence(directory: str | os.PathLike[str]) -> list[LoopLagEvidence]:
    """Every process's loop evidence found under ``directory`` (unreadable files are skipped), by pid."""
    import json

    found: list[LoopLagEvidence] = []
    for path in sorted(Path(directory).glob("loop-*.json")):
        try:
            found.append(LoopLagEvidence.from_dict(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(found, key=lambda e: e.pid or 0)
