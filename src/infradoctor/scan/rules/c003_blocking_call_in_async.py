"""C003 blocking-call-in-async: a blocking call runs on the event loop inside ``async def``.

What it detects:
    Inside an ``async def`` (the innermost function; a nested ``def`` or ``lambda`` resets the context), a call
    that blocks the thread: ``time.sleep``, ``requests``/``httpx``/``urllib3`` module functions,
    ``urllib.request.urlopen``, ``subprocess.run``/``call``/``check_output``, ``os.system``, ``open()``,
    ``Path.read_text()``-style file I/O, ``shutil`` copies, ``torch.load``, a model forward (``model(x)``,
    ``model.forward``), ``model.generate(...)``/``model.predict(...)``, ``.cuda()`` and ``torch.cuda.synchronize()``.

Why it matters:
    An async server runs every request on one event loop. A blocking call stops all of them: throughput collapses
    to one request at a time and p99 grows with concurrency (S001/S002 at run time).

How it is measured:
    Statically. Not reported: calls that are awaited (``await x.generate()``), iterated with ``async for``,
    handed to ``asyncio.create_task``/``gather``, or that sit in the arguments of ``asyncio.to_thread``,
    ``loop.run_in_executor``, ``executor.submit``, ``anyio.to_thread.run_sync`` or ``run_in_threadpool``
    (these run in a worker thread).

Fix:
    ``await asyncio.to_thread(fn, *args)`` or ``await loop.run_in_executor(None, fn, *args)``; or make the
    endpoint a plain ``def`` (FastAPI/Starlette run those in a thread pool); use async clients (httpx.AsyncClient,
    aiohttp, aiofiles, asyncio.create_subprocess_exec).
"""

from __future__ import annotations

from infradoctor.findings import Rule, Severity
from infradoctor.scan import knowledge as K
from infradoctor.scan.visitor import CallInfo, FileContext

RULE = Rule(
    "C003",
    "blocking-call-in-async",
    Severity.HIGH,
    "Blocking call inside async def",
    fix="Await asyncio.to_thread(fn, ...) or loop.run_in_executor, or make the endpoint a plain def.",
    risk="Thread pool size limits concurrency.",
    commands=("scan",),
)

_HTTP_VERBS = frozenset({"get", "post", "put", "delete", "patch", "head", "options", "request", "stream"})
CALL_NAMES = frozenset(
    {q.rsplit(".", 1)[-1] for q in K.BLOCKING_CALLS} | set(K.BLOCKING_METHODS) | _HTTP_VERBS
    | {"generate", "predict"}
)


_PATH_ARITY = {"read_text": (0, 2), "read_bytes": (0, 0), "write_text": (1, 2), "write_bytes": (1, 1),
               "synchronize": (0, 0), "cuda": (0, 1)}


def _path_like_call(call: CallInfo) -> bool:
    """``p.read_text()``/``x.cuda()`` called like the library method, not a method of the user's own class.

    aiohttp's ``self.write_bytes(writer, conn, n)`` is a coroutine function, not ``Path.write_bytes``.
    """
    if call.receiver_key in ("self", "cls"):
        return False
    low, high = _PATH_ARITY.get(call.name or "", (0, 9))
    return low <= len(call.node.args) <= high


def _reason(call: CallInfo, ctx: FileContext) -> str | None:
    qual = call.qualname
    if qual is not None:
        reason = K.BLOCKING_CALLS.get(qual)
        if reason is not None:
            return reason
        head, _, rest = qual.partition(".")
        if head in K.BLOCKING_MODULES and call.name in _HTTP_VERBS and qual not in K.HTTPX_ASYNC and "." not in rest:
            return K.BLOCKING_MODULES[head]
    if call.receiver is None:
        return None
    if call.name in K.BLOCKING_METHODS and _path_like_call(call):
        return K.BLOCKING_METHODS[call.name]
    if call.name in ("generate", "predict") and ctx.is_model_expr(call.receiver):
        return f"{call.receiver_key}.{call.name}() runs the model on the event loop"
    return None


def _report(call: CallInfo, ctx: FileContext, reason: str) -> None:
    ctx.report(
        RULE.code,
        call.node,
        f"blocking call in async function `{ctx.scope.name}`: {reason}",
        {"call": call.qualname or call.key or call.name, "function": ctx.scope.name},
    )


def check(call: CallInfo, ctx: FileContext) -> None:
    """Report a known blocking call made directly on the event loop."""
    scope = ctx.scope
    if not scope.in_async or scope.offload or call.awaited:
        return
    reason = _reason(call, ctx)
    if reason is not None:
        _report(call, ctx, reason)


def check_model_call(call: CallInfo, ctx: FileContext) -> None:
    """Report a model forward made directly on the event loop."""
    scope = ctx.scope
    if not scope.in_async or scope.offload or call.awaited or call.name in CALL_NAMES:
        return
    _report(call, ctx, f"model forward {call.key}(...) runs on the event loop")
