"""C003 blocking-call-in-async: a blocking call runs on the event loop inside ``async def``.

What it detects:
    Inside an ``async def`` (the innermost function; a nested ``def`` or ``lambda`` resets the context), a call
    that blocks the thread: ``time.sleep``, ``requests``/``httpx``/``urllib3`` module functions,
    ``urllib.request.urlopen``, ``subprocess.run``/``call``/``check_output``, ``os.system``, ``open()``,
    ``Path.read_text()``-style file I/O, ``shutil`` copies, ``torch.load``, ``.cuda()``,
    ``torch.cuda.synchronize()``, any method of a synchronous network client (a ``boto3`` client or resource, a
    ``requests.Session``, ``httpx.Client``), and model work: a call of an object that holds a model (a torch module,
    an HF or diffusers pipeline, a SentenceTransformer, another framework's model such as faster-whisper's
    ``WhisperModel``, an inspireface/insightface session or a Keras model; also an app-state entry under a model-like
    key, ``request.app["model"].predict(...)``), any method of such an object that runs it (``generate``,
    ``transcribe``, ``caption``, ``set_image`` ...; not ``.to()``, ``.eval()`` or ``.config``), a function or method
    of the same file that runs a model (``self.inference(batch)``, ``generate_text(model, ...)``; one level deep,
    sync generators when iterated), and a function from another module that is handed a model
    (``generate_chatglm3(model, tokenizer, params)``).

Why it matters:
    An async server runs every request on one event loop. A blocking call stops all of them: throughput collapses
    to one request at a time and p99 grows with concurrency (S001/S002 at run time).

How it is measured:
    Statically. What a name holds is resolved from its assignment: ``self.pipeline = self._init_pipeline()`` in
    ``__init__`` (through the helper's ``return``), a module global assigned under ``if __name__ == "__main__":``,
    a local variable; an object whose assignment is not visible counts as a model only when named like one
    (``model``, ``self.net``), and then only its forward, ``generate``, ``predict`` and similar methods. Pydantic
    models (``chunk.model_dump_json()``), tokenizers, processors and lambdas are not models. Not reported: calls
    that are awaited (``await x.generate()``), iterated with ``async for``, handed to ``asyncio.create_task``/
    ``gather``, or that sit in the arguments of ``asyncio.to_thread``, ``loop.run_in_executor``,
    ``executor.submit``, ``anyio.to_thread.run_sync`` or ``run_in_threadpool`` (these run in a worker thread);
    start-up and shutdown code, which runs before the first request or after the last (a function passed as
    ``lifespan=``/``on_startup=``/``on_shutdown=``, ``@app.on_event("startup")``, ``add_event_handler``, aiohttp's
    ``app.on_startup.append(f)``, Quart's ``before_serving``, Sanic listeners: loading the model there is the fix);
    async tests (``async def test_*``), pytest fixtures and other coroutines under a test folder (``tests/``,
    ``integration-tests/``) that are not request handlers: they serve no traffic.

Fix:
    ``await asyncio.to_thread(fn, *args)`` or ``await loop.run_in_executor(None, fn, *args)``; or make the
    endpoint a plain ``def`` (FastAPI/Starlette run those in a thread pool); use async clients (httpx.AsyncClient,
    aiohttp, aiofiles, asyncio.create_subprocess_exec).
"""

from __future__ import annotations

import ast

from infradoctor.findings import Rule, Severity
from infradoctor.scan import knowledge as K
from infradoctor.scan import values as V
from infradoctor.scan.context import CallInfo, FileContext, Scope

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
CALL_NAMES = frozenset({q.rsplit(".", 1)[-1] for q in K.BLOCKING_CALLS} | set(K.BLOCKING_METHODS) | _HTTP_VERBS)
NOT_BLOCKING_MODULES = frozenset({"asyncio", "anyio", "trio", "logging", "json", "typing", "functools", "contextlib",
                                  "copy", "dataclasses", "inspect", "itertools", "operator", "starlette", "fastapi",
                                  "pydantic", "uvicorn", "ray", "litserve", "bentoml", "sse_starlette", "gc",
                                  "weakref", "collections", "warnings", "traceback"})
"""Modules whose functions do not run a model handed to them (a model passed to ``partial`` or ``logging``)."""


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
    return None


def _report(call: CallInfo, ctx: FileContext, reason: str) -> None:
    ctx.report(
        RULE.code,
        call.node,
        f"blocking call in async function `{ctx.scope.name}`: {reason}",
        {"call": call.qualname or call.key or call.name, "function": ctx.scope.name},
    )


def _on_loop(ctx: FileContext, call: CallInfo) -> bool:
    scope = ctx.scope
    if ctx.in_test_folder and scope.handler is None:
        return False  # a fixture polling a test server: only a route serves traffic in test code
    if scope.startup:
        return False  # a lifespan or startup hook: it runs before the first request (loading there is the fix)
    return scope.in_async and not scope.offload and not call.awaited and not scope.test


def check(call: CallInfo, ctx: FileContext) -> None:
    """Report a known blocking call made directly on the event loop."""
    if not _on_loop(ctx, call) or call.work:
        return
    reason = _reason(call, ctx)
    if reason is not None:
        _report(call, ctx, reason)


def check_model_call(call: CallInfo, ctx: FileContext) -> None:
    """Report model work made directly on the event loop."""
    if not _on_loop(ctx, call):
        return
    held = call.held_key or call.key or "model"
    if call.key == held:
        what = f"{held}(...) runs the model" if call.model != V.PIPELINE else f"{held}(...) runs the pipeline"
    else:
        what = f"{held}.{call.name}() runs the model"
    _report(call, ctx, f"{what} on the event loop")


def check_local_call(call: CallInfo, ctx: FileContext) -> None:
    """Hold a call to a function of this file; reported at the end of the file if that function runs a model."""
    fn = call.callee_fn
    if fn is None or not _on_loop(ctx, call) or isinstance(fn.node, ast.AsyncFunctionDef) or fn.node is ctx.scope.node:
        return
    if fn.generator and ctx.data.get("iterated") is not call:
        return  # a generator handed to a StreamingResponse runs in Starlette's thread pool; iterated here, it blocks
    held: list[tuple[Scope, CallInfo]] = ctx.data.setdefault(RULE.code, [])
    held.append((ctx.scope, call))


def check_async_call(call: CallInfo, ctx: FileContext) -> None:
    """Report a function from another module that is handed a model (``generate(model, tokenizer, params)``)."""
    node = call.node
    if _sync_client_call(call, ctx):
        return
    if call.work or call.callee_fn is not None or ctx.scope.test or not isinstance(node.func, ast.Name):
        return
    name = node.func.id
    qual = ctx.resolve(name)
    if name not in ctx.index.shadowed and (  # a relative import is this project's own function
            qual is None or qual.split(".", 1)[0] in NOT_BLOCKING_MODULES or qual.startswith("builtins.")):
        return
    for arg in (*node.args, *(kw.value for kw in node.keywords)):
        if isinstance(arg, (ast.Name, ast.Attribute)) and ctx.kind_of(arg) in V.MODEL_KINDS:
            _report(call, ctx, f"{node.func.id}() is handed the model `{ast.unparse(arg)}` and runs it on the "
                    "event loop")
            return


def _sync_client_call(call: CallInfo, ctx: FileContext) -> bool:
    """Report a synchronous network client's method called on the event loop; True when reported.

    ``boto3.client("s3").get_object(...)``, a ``requests.Session``'s ``get``.
    """
    name = call.name
    if call.receiver_key is None or name is None or name[:1].isupper() or name in K.SYNC_CLIENT_SAFE_METHODS or (
            not _on_loop(ctx, call)):
        return False  # `s3.Object(bucket, key)` builds a resource locally; its `.get()` does the I/O
    if ctx.key_kind(call.receiver_key) != V.SYNC_CLIENT:
        return False
    _report(call, ctx, f"{call.receiver_key}.{name}() is synchronous network I/O (a boto3, requests or httpx "
            "client); use an async client or asyncio.to_thread")
    return True


def file_end(ctx: FileContext) -> None:
    """Report calls made on the event loop to functions of this file that run a model."""
    for scope, call in ctx.data.get(RULE.code, []):
        summary = ctx.summary_of(call.callee_fn)
        if summary is None or not summary.work or call.callee_fn is None:
            continue
        line, what = summary.work[0]
        name = call.callee_fn.qualname.rsplit(".", 1)[-1] if call.key and call.key.startswith("self.") else (
            call.callee_fn.qualname)
        hit = ctx.make_hit(
            RULE.code, call.node,
            f"blocking call in async function `{scope.name}`: {call.key}() runs the model ({what} at line {line}) "
            "on the event loop",
            {"call": call.key, "function": scope.name, "helper": name, "model_line": line},
        )
        hit.function = scope.name
        ctx.hits.append(hit)
