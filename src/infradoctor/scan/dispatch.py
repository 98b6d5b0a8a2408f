"""Rule dispatch: the enabled scan rules indexed by the events they subscribe to.

A scan rule is a module under :mod:`infradoctor.scan.rules` declaring ``RULE`` and any of these hooks:

- ``CALL_NAMES`` + ``check(call, ctx)``: a call whose called name is in the set;
- ``check_model_call(call, ctx)``: a call that runs a model (``call.work``; ``call.forward`` for torch forwards);
- ``check_model_load(call, ctx)``: a call that loads or builds a model (``call.load_kind``);
- ``check_local_call(call, ctx)``: a call of a function or method defined in the file (``call.callee_fn``);
- ``check_async_call(call, ctx)``: a call made directly on the event loop (in ``async def``, not awaited, not
  handed to a thread);
- ``NODES`` + ``check_node(node, ctx)``: a syntax node of one of these types, before its children;
- ``loop_end(frame, ctx)``, ``scope_end(scope, ctx)``, ``file_end(ctx)``: when a loop, a scope, the file ends;
- ``check_launcher(text, display, file_kind) -> list[Launched]``: a launcher file (Dockerfile, Procfile, shell,
  Compose, Kubernetes manifest) for findings that need another file's facts;
- ``resolve_cross_file(violation, display, provider, nearest) -> Violation | None``: completes a hit that
  required another file's fact (``Hit.requires``), once every file has been scanned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

RuleHook = Callable[..., Any]


@dataclass
class RuleSet:
    """Enabled rules, indexed by the events they subscribe to."""

    by_call_name: dict[str, list[RuleHook]] = field(default_factory=dict)
    on_model_call: list[RuleHook] = field(default_factory=list)
    on_model_load: list[RuleHook] = field(default_factory=list)
    on_local_call: list[RuleHook] = field(default_factory=list)
    on_async_call: list[RuleHook] = field(default_factory=list)
    on_node: dict[type, list[RuleHook]] = field(default_factory=dict)
    on_loop_end: list[RuleHook] = field(default_factory=list)
    on_scope_end: list[RuleHook] = field(default_factory=list)
    on_file_end: list[RuleHook] = field(default_factory=list)
    launcher_checks: dict[str, RuleHook] = field(default_factory=dict)
    """Code -> ``check_launcher`` hook."""
    cross_file: dict[str, RuleHook] = field(default_factory=dict)
    """Code -> ``resolve_cross_file`` hook."""
    codes: frozenset[str] = frozenset()

    @classmethod
    def from_modules(cls, modules: Iterable[ModuleType]) -> RuleSet:
        """Index rule modules by the hooks they define."""
        rules = cls()
        codes: set[str] = set()
        for module in modules:
            code = module.RULE.code
            codes.add(code)
            check = getattr(module, "check", None)
            if check is not None:
                for name in module.CALL_NAMES:
                    rules.by_call_name.setdefault(name, []).append(check)
            for attr, target in (("check_model_call", rules.on_model_call),
                                 ("check_model_load", rules.on_model_load), ("loop_end", rules.on_loop_end),
                                 ("check_local_call", rules.on_local_call),
                                 ("check_async_call", rules.on_async_call),
                                 ("scope_end", rules.on_scope_end), ("file_end", rules.on_file_end)):
                hook = getattr(module, attr, None)
                if hook is not None:
                    target.append(hook)
            node_hook = getattr(module, "check_node", None)
            if node_hook is not None:
                for node_type in module.NODES:
                    rules.on_node.setdefault(node_type, []).append(node_hook)
            for attr, table in (("check_launcher", rules.launcher_checks), ("resolve_cross_file", rules.cross_file)):
                hook = getattr(module, attr, None)
                if hook is not None:
                    table[code] = hook
        rules.codes = frozenset(codes)
        return rules
