"""Injected into every Python process started under ``infradoctor profile`` (via ``PYTHONPATH``).

In the profiled program's own interpreter (the runner activates it) this does nothing more. In other Python
processes of the run (spawned DataLoader workers, or the program itself when the command was not ``python ...``),
it installs the instrumentation when ``torch`` is imported. Then it imports the ``sitecustomize`` this one shadows.
"""

from __future__ import annotations

import importlib
import os
import sys


def _install() -> None:
    events_dir = os.environ.get("INFRADOCTOR_PROFILE_DIR")
    if not events_dir:
        return
    try:
        from infradoctor.profile import instrument

        role = os.environ.get("INFRADOCTOR_PROFILE_ROLE")
        if role == "runner":
            return  # the runner activates the recorder in this process itself
        if role == "any":
            os.environ["INFRADOCTOR_PROFILE_ROLE"] = "child"
            instrument.activate(events_dir, "main", list(sys.argv))
        else:
            instrument.activate_worker_support()
    except Exception as exc:  # noqa: BLE001 - never break the program
        sys.stderr.write(f"infradoctor profile: not instrumenting this process: {type(exc).__name__}: {exc}\n")


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    saved = list(sys.path)
    this = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if this is not None:
            sys.modules["sitecustomize"] = this


_install()
_chain()
