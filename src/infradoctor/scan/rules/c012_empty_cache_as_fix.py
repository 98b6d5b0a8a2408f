"""C012 empty-cache-as-fix: ``torch.cuda.empty_cache()`` runs in a loop or a request handler.

What it detects:
    ``torch.cuda.empty_cache()`` (through any alias) inside a hot loop (one that calls a model, ``.backward()`` or
    an optimizer step), or inside a request handler (route decorators, Ray Serve deployment methods, registered
    routes). A loop over devices or other cleanup loops are not reported.

Why it matters:
    ``empty_cache`` frees only blocks the caching allocator holds and no tensor uses; it frees nothing live, so it
    does not fix a leak or an OOM. Called per iteration or per request it forces the allocator to call
    ``cudaMalloc`` again (slow, synchronising) and fragments memory. It is usually a symptom of memory growth
    (P007) being treated instead of found.

How it is measured:
    Statically, from the call's place: held per loop until the loop is known to be hot (as C006), and handler
    recognition.

Fix:
    Remove it; find what holds memory (tensors kept with their graph: C008/P007, caches, references in lists).
    Call it at most once after a phase ends if another process needs the memory.
"""

from __future__ import annotations

from infradoctor.findings import Rule, Severity
from infradoctor.scan.visitor import CallInfo, FileContext, Hit, LoopFrame

RULE = Rule(
    "C012",
    "empty-cache-as-fix",
    Severity.LOW,
    "torch.cuda.empty_cache() in a loop or handler",
    fix="Remove it; find what holds memory instead (P007). It slows every call and frees nothing live.",
    risk="None.",
    commands=("scan",),
)
CALL_NAMES = frozenset({"empty_cache"})


def check(call: CallInfo, ctx: FileContext) -> None:
    """Report empty_cache() in a loop now, or in a function that turns out to be a handler."""
    if call.qualname not in ("torch.cuda.empty_cache", "torch.cuda.memory.empty_cache"):
        return
    if ctx.loops:
        held: list[Hit] = ctx.data.setdefault(RULE.code, {}).setdefault(id(ctx.loops[-1]), [])
        held.append(ctx.make_hit(RULE.code, call.node, "torch.cuda.empty_cache() inside a training/inference loop "
                                 "slows every iteration and frees nothing live; find what holds memory instead",
                                 {"place": "loop"}))
        return
    scope = ctx.scope
    if scope.kind in ("def", "async"):
        ctx.report_if_handler(scope, ctx.make_hit(
            RULE.code, call.node, f"torch.cuda.empty_cache() in request handler `{scope.name}` slows every request "
            "and frees nothing live", {"place": "handler"}))


def loop_end(frame: LoopFrame, ctx: FileContext) -> None:
    """Report held calls of a hot loop; pass them to the enclosing loop otherwise."""
    held_by_loop: dict[int, list[Hit]] = ctx.data.get(RULE.code, {})
    held = held_by_loop.pop(id(frame), None)
    if not held:
        return
    if frame.hot:
        ctx.hits.extend(held)
    elif ctx.loops:
        held_by_loop.setdefault(id(ctx.loops[-1]), []).extend(held)
