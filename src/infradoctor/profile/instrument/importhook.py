"""A meta-path finder that runs a callback right after a named module is executed (torch, transformers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from infradoctor.profile.instrument import state


class ImportHook:
    """Meta-path finder that runs a callback right after a named module is executed."""

    def __init__(self, callbacks: dict[str, Callable[[Any], None]]) -> None:
        self.callbacks = dict(callbacks)
        self.busy: set[str] = set()

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        callback = self.callbacks.get(name)
        if callback is None or name in self.busy:
            return None
        import importlib.util

        self.busy.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy.discard(name)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return None
        exec_module = loader.exec_module
        hook = self

        def exec_and_instrument(module: Any) -> None:
            exec_module(module)
            hook.callbacks.pop(name, None)
            try:
                callback(module)
            except Exception as exc:  # noqa: BLE001
                state.warn_once(f"import-hook.{name}", exc)

        loader.exec_module = exec_and_instrument
        return spec
