"""C001 model-load-in-handler: a model is built or loaded inside a request handler.

What it detects:
    A call that loads or builds a model (``torch.load``, ``torch.jit.load``, ``torch.hub.load``,
    ``*.from_pretrained``, ``*.load_state_dict``, ``transformers.pipeline``, torchvision model builders, an
    ``nn.Module`` subclass defined in the same file, ``onnxruntime.InferenceSession``, ``joblib.load`` ...) inside a
    function that serves requests: a FastAPI/Starlette/Flask/aiohttp/Sanic route (``@app.post("/predict")``), a
    method of a Ray Serve deployment (except ``__init__``), or a function registered as a route
    (``app.add_route``, ``app.router.add_post``, ``Route("/p", endpoint=f)``, ``add_url_rule``).

Why it matters:
    Every request then pays the full load: reading hundreds of MB from disk, unpickling, allocating weights,
    often copying them to the GPU. Latency is seconds instead of milliseconds and memory churns; under load the
    server thrashes.

How it is measured:
    Statically, from the syntax tree: import aliases are resolved (``import torch as t``), handlers are recognised
    from decorators on names bound to ``FastAPI()``/``Flask()``/... or route paths, and from registration calls
    anywhere in the file. A load guarded by a lazy-initialisation test (``if model is None:``, ``if not cache``,
    ``if key not in cache``) is accepted: it runs once.

Fix:
    Load the model once at start-up (module level, a FastAPI lifespan/startup hook, a Ray Serve ``__init__``)
    and reuse it in the handler.
"""

from __future__ import annotations

from infradoctor.findings import Rule, Severity
from infradoctor.scan.visitor import CallInfo, FileContext

RULE = Rule(
    "C001",
    "model-load-in-handler",
    Severity.HIGH,
    "Model built or loaded inside a request handler",
    fix="Load the model once at start-up (module level or lifespan/startup hook) and reuse it in the handler.",
    risk="Start-up takes longer.",
    commands=("scan",),
)


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
