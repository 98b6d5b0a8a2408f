"""C001 model-load-in-handler: a model is built or loaded inside a request handler.

What it detects:
    A call that loads or builds a model (``torch.load``, ``torch.jit.load``, ``torch.hub.load``,
    ``*.from_pretrained``, ``*.load_state_dict``, ``transformers.pipeline``, torchvision model builders, an
    ``nn.Module`` subclass defined in the same file, ``onnxruntime.InferenceSession``, ``joblib.load`` ...) inside a
    function that serves requests: a FastAPI/Starlette/Flask/aiohttp/Sanic route (``@app.post("/predict")``), a
    method of a Ray Serve deployment (except ``__init__``), a per-request method of a serving framework class
    (TorchServe's ``handle``/``preprocess``/``inference``/``postprocess``, also in a plain class with
    ``initialize(self, context)`` and ``handle(self, data, context)``; LitServe's ``predict``; BentoML's
    ``@bentoml.api``; KServe, MLServer, Cog, Triton's ``execute``), or a function registered as a route
    (``app.add_route``, ``app.router.add_post``, ``Route("/p", endpoint=f)``, ``add_url_rule``). Also a handler
    that calls a function or method of the same file that loads the model (one level deep), reported at the call.

Why it matters:
    Every request then pays the full load: reading hundreds of MB from disk, unpickling, allocating weights,
    often copying them to the GPU. Latency is seconds instead of milliseconds and memory churns; under load the
    server thrashes.

How it is measured:
    Statically, from the syntax tree: import aliases are resolved (``import torch as t``), handlers are recognised
    from decorators on names bound to ``FastAPI()``/``Flask()``/... or route paths, and from registration calls
    anywhere in the file. A load guarded by a lazy-initialisation test (``if model is None:``, ``if not cache``,
    ``if key not in cache``) is accepted: it runs once; so is a helper decorated with ``functools.cache`` or
    ``lru_cache``. A test is lazy initialisation only when its body sets what it tests (assigns or fills it, or calls
    a function of the file that does: a loader declaring ``global model``, a method assigning ``self.net``);
    ``if ext in ALLOWED:`` guards nothing. A method that only shares its name with a route function is not that
    route. Tokenizers and processors (``AutoTokenizer.from_pretrained``) are not counted as model loads.

Fix:
    Load the model once at start-up (module level, a FastAPI lifespan/startup hook, a Ray Serve ``__init__``)
    and reuse it in the handler.
"""

from __future__ import annotations

from typing import Any

from infradoctor.findings import Rule, Severity
from infradoctor.scan.context import CallInfo, FileContext, Scope

RULE = Rule(
    "C001",
    "model-load-in-handler",
    Severity.HIGH,
    "Model built or loaded inside a request handler",
    fix="Load the model once at start-up (module level or lifespan/startup hook) and reuse it in the handler.",
    risk="Start-up takes longer.",
    commands=("scan",),
)
CACHING_DECORATORS = frozenset({"cache", "lru_cache", "cached", "cached_property", "memoize", "alru_cache"})
"""Decorators that make a loading helper run once."""


def check_model_load(call: CallInfo, ctx: FileContext) -> None:
    """Report a load inside a function that is (or turns out to be) a request handler."""
    scope = ctx.scope
    if scope.kind not in ("def", "async") or scope.guards:
        return
    kind = call.load_kind or ""
    what = kind.removeprefix("build ")
    verb = "built" if kind.startswith("build") else "loaded"
    hit = ctx.make_hit(
        RULE.code,
        call.node,
        f"model {verb} inside request handler `{scope.name}` ({what}); load it once at start-up",
        {"call": what, "function": scope.name},
    )
    ctx.report_if_handler(scope, hit)


def check_local_call(call: CallInfo, ctx: FileContext) -> None:
    """Remember a call to a function of this file; judged at the end of the file, when its loads are known."""
    scope = ctx.scope
    fn = call.callee_fn
    if scope.kind not in ("def", "async") or scope.guards or fn is None or fn.node is scope.node:
        return
    if any(_decorator_name(d) in CACHING_DECORATORS for d in fn.node.decorator_list):
        return
    held: list[tuple[Scope, CallInfo]] = ctx.data.setdefault(RULE.code, [])
    held.append((scope, call))


def _decorator_name(node: Any) -> str:
    while hasattr(node, "func"):
        node = node.func
    return str(getattr(node, "attr", None) or getattr(node, "id", ""))


def file_end(ctx: FileContext) -> None:
    """Report handlers that call a helper of this file which loads a model every time it runs."""
    for scope, call in ctx.data.get(RULE.code, []):
        if scope.handler is None and not ctx.is_registered(scope):
            continue
        summary = ctx.summary_of(call.callee_fn)
        if summary is None or not summary.loads:
            continue
        line, what = summary.loads[0]
        name = call.callee_fn.qualname if call.callee_fn is not None else call.key
        hit = ctx.make_hit(
            RULE.code, call.node,
            f"request handler `{scope.name}` calls `{name}()`, which loads the model ({what} at line {line}) on "
            "every request; load it once at start-up",
            {"call": what, "function": scope.name, "helper": name, "load_line": line,
             "handler": scope.handler or "registered route"},
        )
        hit.function = scope.name
        ctx.hits.append(hit)
