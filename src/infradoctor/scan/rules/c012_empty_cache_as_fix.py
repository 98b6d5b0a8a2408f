"""C012 empty-cache-as-fix: ``torch.cuda.empty_cache()`` runs in a loop or a request handler.

What it detects:
    ``torch.cuda.empty_cache()`` (through any alias) inside a hot loop (one that calls a model, ``.backward()`` or
    an optimizer step), or inside a request handler (route decorators, Ray Serve deployment methods, serving
    framework handler methods, registered routes). Not reported: loops over devices or other cleanup loops,
    profiling, benchmarking and cleanup helpers (a function named like ``profile_memory``, ``benchmark``,
    ``cleanup``, ``free_memory``, or one that reads memory statistics such as ``torch.cuda.max_memory_allocated``,
    or a file named like a benchmark), where emptying the cache is part of measuring; test code.

Why it matters:
    ``empty_cache`` frees only blocks the caching allocator holds and no tensor uses; it frees nothing live, so it
    does not fix a leak or an OOM. Called per iteration or per request it forces the allocator to call
    ``cudaMalloc`` again (slow, synchronising) and fragments memory. It is usually a symptom of memory growth
    (P007) being treated instead of found.

How it is measured:
    Statically, from the call's place: held per loop until the loop is known to be hot (as C006), and handler
    recognition.

    Preview (off by default; ``--select C012`` runs it): it has never fired on the 36 repositories of the scan
    corpus; its one hit in the issue's first try (a profiling helper) was false.

Fix:
    Remove it; find what holds memory (tensors kept with their graph: C008/P007, caches, references in lists).
    Call it at most once after a phase ends if another process needs the memory.
"""

from __future__ import annotations

from infradoctor.findings import Rule, Severity
from infradoctor.scan import knowledge as K
from infradoctor.scan.context import CallInfo, FileContext, Hit, LoopFrame, Scope

RULE = Rule(
    "C012",
    "empty-cache-as-fix",
    Severity.LOW,
    "torch.cuda.empty_cache() in a loop or handler",
    fix="Remove it; find what holds memory instead (P007). It slows every call and frees nothing live.",
    risk="None.",
    commands=("scan",),
    preview=True,
)
CALL_NAMES = frozenset({"empty_cache"} | {q.rsplit(".", 1)[-1] for q in K.MEMORY_PROBES})
_BENCH_FILE = ("bench", "profil")


def _measuring(scope: Scope, ctx: FileContext) -> bool:
    """The function measures memory or time (a profiling or cleanup helper), or the file is a benchmark."""
    name = ctx.path.replace("\\", "/").rsplit("/", 1)[-1].lower()
    if any(word in name for word in _BENCH_FILE):
        return True
    fn: Scope | None = scope
    while fn is not None and fn.is_function:
        if K.PROFILING_NAME_RE.search(fn.name.rsplit(".", 1)[-1]) or fn.data.get(RULE.code + ":probe"):
            return True
        fn = fn.parent
    return False


def check(call: CallInfo, ctx: FileContext) -> None:
    """Hold empty_cache() in a loop or a function that may turn out to be a handler; note memory probes."""
    qual = call.qualname
    scope = ctx.scope
    if qual in K.MEMORY_PROBES:
        scope.data[RULE.code + ":probe"] = True
        return
    if qual not in ("torch.cuda.empty_cache", "torch.cuda.memory.empty_cache"):
        return
    if ctx.loops:
        held: list[Hit] = ctx.loops[-1].data.setdefault(RULE.code, [])
        held.append(ctx.make_hit(RULE.code, call.node, "torch.cuda.empty_cache() inside a training/inference loop "
                                 "slows every iteration and frees nothing live; find what holds memory instead",
                                 {"place": "loop"}))
    elif scope.kind in ("def", "async"):
        handler_held: list[tuple[Scope, Hit]] = scope.data.setdefault(RULE.code, [])
        handler_held.append((scope, ctx.make_hit(
            RULE.code, call.node, f"torch.cuda.empty_cache() in request handler `{scope.name}` slows every request "
            "and frees nothing live", {"place": "handler"})))


def loop_end(frame: LoopFrame, ctx: FileContext) -> None:
    """Keep held calls of a hot loop for the function's end; pass them to the enclosing loop otherwise."""
    held: list[Hit] | None = frame.data.pop(RULE.code, None)
    if not held:
        return
    if frame.hot:
        kept: list[tuple[Scope, Hit]] = ctx.scope.data.setdefault(RULE.code + ":loop", [])
        kept.extend((ctx.scope, hit) for hit in held)
    elif ctx.loops:
        ctx.loops[-1].data.setdefault(RULE.code, []).extend(held)


def scope_end(scope: Scope, ctx: FileContext) -> None:
    """Report what the function held, unless it measures memory (a profiling or cleanup helper)."""
    in_loops: list[tuple[Scope, Hit]] = scope.data.get(RULE.code + ":loop", [])
    in_body: list[tuple[Scope, Hit]] = scope.data.get(RULE.code, [])
    if not (in_loops or in_body) or _measuring(scope, ctx):
        return
    ctx.hits.extend(hit for _, hit in in_loops)
    for owner, hit in in_body:
        ctx.report_if_handler(owner, hit)
