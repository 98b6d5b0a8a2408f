"""Where models come from: weight loading, Module construction, unpickling and copies.

Weight loading (``torch.load``, ``load_state_dict``, ``from_pretrained``) and Module construction are counted per
user call site; models that appear without a constructor (unpickled by ``torch.load``, ``copy.deepcopy``) and every
construction or load arm the discovery hooks again, so a model that appears late is still seen.
"""

from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from infradoctor.profile.instrument import state

if TYPE_CHECKING:
    from infradoctor.profile.instrument.recorder import Recorder


def install_loads(rec: Recorder, torch: Any) -> None:
    """Time weight loading per user call site."""

    def make(kind: str, orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if rec.load_depth:
                return orig(*args, **kwargs)
            t0 = rec.clock()
            rec.load_depth += 1
            try:
                return orig(*args, **kwargs)
            finally:
                rec.load_depth -= 1
                try:
                    dt = rec.clock() - t0
                    frame = rec.user_frame(sys._getframe(1))
                    file = frame.f_code.co_filename if frame else "?"
                    line = frame.f_lineno if frame else 0
                    entry = rec.loads.setdefault(
                        (kind, file, line), {"kind": kind, "file": file, "line": line, "calls": 0, "time_s": 0.0}
                    )
                    entry["calls"] += 1
                    entry["time_s"] += dt
                    rec.step.load += dt
                    rec.arm_discovery()  # a whole module may have come out of the file
                except Exception as exc:  # noqa: BLE001
                    state.warn_once("load", exc)

        return wrapper

    load = make("torch.load", torch.load)
    torch.load = load
    torch.serialization.load = load
    torch.nn.Module.load_state_dict = make("load_state_dict", torch.nn.Module.load_state_dict)
    rec.patch_from_pretrained = lambda cls: patch_classmethod(cls, "from_pretrained", make)


def patch_classmethod(cls: Any, name: str, make: Callable[[str, Callable[..., Any]], Callable[..., Any]]) -> None:
    """Wrap a classmethod (``PreTrainedModel.from_pretrained``) with ``make``."""
    bound = getattr(cls, name, None)
    if bound is None or getattr(bound, "__infradoctor__", False):
        return
    func = bound.__func__
    wrapped = make(f"{cls.__name__}.{name}", func)
    wrapped.__infradoctor__ = True  # type: ignore[attr-defined]
    setattr(cls, name, classmethod(wrapped))


def install_construction(rec: Recorder, torch: Any) -> None:
    """Count Module constructions per user call site; keep our forward wrapper out of pickles and copies."""
    module_cls = torch.nn.Module
    init = module_cls.__init__

    @functools.wraps(init)
    def module_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        try:
            rec.arm_discovery()
            frame: FrameType | None = sys._getframe(1)
            top = self
            while frame is not None:
                code = frame.f_code
                if code.co_name == "__init__" and isinstance(frame.f_locals.get("self"), module_cls):
                    top = frame.f_locals["self"]
                elif not rec.is_internal(code):
                    break
                frame = frame.f_back
            if frame is None:
                return
            key = (frame.f_code.co_filename, frame.f_lineno)
            entry = rec.constructions.get(key)
            now = rec.clock()
            if entry is None:
                entry = rec.constructions[key] = {"count": 0, "class": type(top).__name__, "marker": None,
                                                  "params": None, "ref": None, "time_s": 0.0, "start": now,
                                                  "last": now}
            # modules built at one line count once until the program calls a model: `Sequential(Linear(), ...)`
            # is one construction; the same line again after forward calls (a loop, a handler) is another.
            # Its time: from the first to the last submodule's construction (the last one's own init excluded)
            if entry["marker"] != rec.forward_calls:
                entry["marker"] = rec.forward_calls
                entry["count"] += 1
                entry["time_s"] += entry["last"] - entry["start"]
                entry["start"] = now
            entry["last"] = now
            entry["class"] = type(top).__name__
            entry["ref"] = weakref.ref(top)
        except Exception as exc:  # noqa: BLE001
            state.warn_once("module.init", exc)

    module_cls.__init__ = module_init

    getstate = module_cls.__getstate__

    @functools.wraps(getstate)
    def module_getstate(self: Any) -> Any:
        module_state = getstate(self)
        forward = module_state.get("forward") if isinstance(module_state, dict) else None
        if forward is not None and getattr(forward, "__infradoctor__", False):
            module_state = dict(module_state)
            del module_state["forward"]
        return module_state

    module_cls.__getstate__ = module_getstate

    setstate = module_cls.__setstate__

    @functools.wraps(setstate)
    def module_setstate(self: Any, module_state: Any) -> None:
        setstate(self, module_state)
        try:
            rec.arm_discovery()  # unpickled (torch.load of a whole module) or deep-copied: a model may appear now
        except Exception as exc:  # noqa: BLE001
            state.warn_once("module.setstate", exc)

    module_cls.__setstate__ = module_setstate
