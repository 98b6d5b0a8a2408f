"""Allocation sites, followed over single steps once memory growth is suspected.

The user line of each large op output and whether it is ever freed (the leak site).
"""

from __future__ import annotations

import sys
import weakref
from typing import TYPE_CHECKING, Any

from infradoctor.profile.instrument import state

if TYPE_CHECKING:
    from infradoctor.profile.instrument.recorder import Recorder

ALLOC_MIN_BYTES = 4096
"""Allocations smaller than this are not followed."""


def allocation_sampler(rec: Recorder) -> Any:
    """A dispatch mode that notes the user line of each large op output and whether it is ever freed."""
    from torch.utils._python_dispatch import TorchDispatchMode

    tensor_cls = state.torch.Tensor

    def freed(entry: list[int], nbytes: int) -> None:
        entry[2] -= 1
        entry[3] -= nbytes

    class AllocationSites(TorchDispatchMode):  # type: ignore[misc,no-untyped-call]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            try:
                first = out[0] if isinstance(out, (tuple, list)) and out else out
                if isinstance(first, tensor_cls) and not first._is_view():
                    nbytes = int(first.untyped_storage().nbytes())
                    if nbytes >= ALLOC_MIN_BYTES:
                        frame = rec.user_frame(sys._getframe(1))
                        if frame is not None:
                            key = (frame.f_code.co_filename, frame.f_lineno)
                            entry = rec.alloc_sites.get(key)
                            if entry is None:
                                entry = rec.alloc_sites[key] = [0, 0, 0, 0]
                            entry[0] += 1
                            entry[1] += nbytes
                            entry[2] += 1
                            entry[3] += nbytes
                            weakref.finalize(first, freed, entry, nbytes).atexit = False
            except Exception as exc:  # noqa: BLE001
                state.warn_once("memory.alloc-sites", exc)
            return out

    return AllocationSites()  # type: ignore[no-untyped-call]
