"""``torch.autograd.backward``/``grad`` timed, and optimizer steps (global pre/post hooks): step boundaries."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from infradoctor.profile.instrument import state

if TYPE_CHECKING:
    from infradoctor.profile.instrument.recorder import Recorder


def install(rec: Recorder, torch: Any) -> None:
    """Patch autograd's entry points."""
    from infradoctor.profile.instrument.recorder import _cuda_event_pair

    clock = rec.clock
    local = state.local

    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if getattr(local, "in_backward", False):
                return orig(*args, **kwargs)
            t0 = clock()
            events = _cuda_event_pair() if rec.cuda_in_use() else None
            local.in_backward = True
            try:
                return orig(*args, **kwargs)
            finally:
                local.in_backward = False
                try:
                    dt = clock() - t0
                    rec.backward_calls += 1
                    rec.backward_time += dt
                    rec.step.backward += dt
                    rec.step.backwards += 1
                    rec.backward_done()
                    if events is not None:
                        events[1].record()
                        rec.pending_gpu.append((events[0], events[1], "backward"))
                except Exception as exc:  # noqa: BLE001
                    state.warn_once("autograd", exc)

        return wrapper

    torch.autograd.backward = make(torch.autograd.backward)
    torch.autograd.grad = make(torch.autograd.grad)


def install_optimizer(rec: Recorder, torch: Any) -> None:
    """Global optimizer step hooks: an optimizer step ends a training step."""
    from torch.optim import optimizer as optim_mod

    def pre(optimizer: Any, args: Any, kwargs: Any) -> None:
        rec.opt_t0 = rec.clock()

    def post(optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            now = rec.clock()
            dt = now - rec.opt_t0 if rec.opt_t0 else 0.0
            rec.opt_t0 = 0.0
            rec.optimizer_steps += 1
            rec.optimizer_time += dt
            rec.step.optimizer += dt
            rec.boundary("optimizer", now, before=False)
        except Exception as exc:  # noqa: BLE001
            state.warn_once("optimizer", exc)

    optim_mod.register_optimizer_step_pre_hook(pre)
    optim_mod.register_optimizer_step_post_hook(post)
