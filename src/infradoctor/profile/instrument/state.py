"""What every part of the in-process recorder shares: the torch module, the recorder, per-thread flags.

Runs inside the profiled child: standard library only (torch arrives through :func:`set_torch`).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infradoctor.profile.instrument.recorder import Recorder

EVENTS_DIR_ENV = "INFRADOCTOR_PROFILE_DIR"
"""Environment variable naming the events folder; instrumentation is active only where it is set."""

torch: Any = None
"""The torch module, once imported by the workload (hot paths avoid an import statement per call)."""
recorder: Recorder | None = None
"""The active recorder of this process."""
local = threading.local()
"""Per-thread flags: ``top`` (inside a top-level model call), ``in_fetch`` (inside a dataset fetch: modules
called there are data transforms, not models), ``depth``/``discovering`` (discovery hooks), ``in_backward``."""
lock = threading.Lock()
"""Guards the evidence files."""


def warn_once(key: str, exc: BaseException) -> None:
    """Note an instrumentation failure (once per ``key`` on stderr; counted after that); never raises."""
    rec = recorder
    seen = rec.errors if rec is not None else {}
    if key in seen:
        seen[key]["count"] += 1
        return
    seen[key] = {"source": key, "message": f"{type(exc).__name__}: {exc}", "count": 1}
    with contextlib.suppress(Exception):
        sys.stderr.write(
            f"infradoctor profile: instrumentation error in {key} (ignored): {type(exc).__name__}: {exc}\n"
        )
