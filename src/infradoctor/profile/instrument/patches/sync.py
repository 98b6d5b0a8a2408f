"""Host reads of tensor values (``item``, ``tolist``, ``cpu``, ``numpy``, ``__bool__``, ...), counted per user line."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from infradoctor.profile.instrument import state
from infradoctor.profile.instrument.records import SyncSiteStats

if TYPE_CHECKING:
    from infradoctor.profile.instrument.recorder import Recorder

SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__iter__", "__repr__",
                "__format__")
"""Tensor methods that read a tensor's values on the host (a device sync on GPU)."""


def install(rec: Recorder, torch: Any) -> None:
    """Patch the Tensor methods.

    Reads from torch and infradoctor are not counted; reads from installed packages (a dataset class in
    site-packages) count at the user's line that led there.
    """
    clock = rec.clock
    sites = rec.sites
    local = state.local

    def make(kind: str, orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            code = frame.f_code
            internal = rec.internal_code.get(code)
            if internal is None:
                internal = rec.is_internal(code)
            if internal:
                return orig(self, *args, **kwargs)
            t0 = clock()
            out = orig(self, *args, **kwargs)
            t1 = clock()
            try:
                installed = rec.installed_code.get(code)
                if installed is None:
                    installed = rec.is_installed(code)
                if installed:
                    user = rec.user_frame(frame)
                    if user is not None:
                        frame, code = user, user.f_code
                key = (code, frame.f_lineno, kind)
                site = sites.get(key)
                if site is None:
                    site = sites[key] = SyncSiteStats(kind, code, frame.f_lineno)
                site.calls += 1
                dt = t1 - t0
                site.time += dt
                if kind == "iter":
                    site.elements += int(self.shape[0]) if self.dim() else 0
                if site.first < 0:
                    site.first = t0
                    rec.step.active_sites.append(site)
                site.last = t1
                step = rec.step
                step.syncs += 1
                if not getattr(local, "top", False) and not getattr(local, "in_fetch", False):
                    step.sync += dt
            except Exception as exc:  # noqa: BLE001
                state.warn_once("tensor.sync", exc)
            return out

        return wrapper

    for name in SYNC_METHODS:
        orig = getattr(torch.Tensor, name, None)
        if orig is not None:
            setattr(torch.Tensor, name, make(name.strip("_"), orig))
