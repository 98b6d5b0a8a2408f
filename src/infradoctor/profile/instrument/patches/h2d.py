"""GPU only: host-to-device copies (``Tensor.to``/``.cuda``) from user code, and whether their source was pinned."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from infradoctor.profile.instrument import state

if TYPE_CHECKING:
    from infradoctor.profile.instrument.recorder import Recorder


def install(rec: Recorder, torch: Any) -> None:
    """Patch ``Tensor.to`` and ``Tensor.cuda``."""
    clock = rec.clock

    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self.device.type != "cpu" or rec.is_internal(sys._getframe(1).f_code):
                return orig(self, *args, **kwargs)
            t0 = clock()
            out = orig(self, *args, **kwargs)
            try:
                if out is not self and getattr(out, "device", None) is not None and out.device.type == "cuda":
                    dt = clock() - t0
                    nbytes = int(self.numel() * self.element_size())
                    h2d = rec.h2d
                    h2d["copies"] += 1
                    h2d["bytes"] += nbytes
                    h2d["time_s"] += dt
                    if not self.is_pinned():
                        h2d["pageable_copies"] += 1
                        h2d["pageable_bytes"] += nbytes
                        frame = sys._getframe(1)
                        if frame is not None:
                            key = f"{frame.f_code.co_filename}:{frame.f_lineno}"
                            sites = h2d["pageable_sites"]
                            if key in sites or len(sites) < 20:
                                sites[key] = sites.get(key, 0) + 1
                    if kwargs.get("non_blocking"):
                        h2d["non_blocking_copies"] += 1
                    rec.step.h2d += dt
            except Exception as exc:  # noqa: BLE001
                state.warn_once("h2d", exc)
            return out

        return wrapper

    torch.Tensor.to = make(torch.Tensor.to)
    torch.Tensor.cuda = make(torch.Tensor.cuda)
