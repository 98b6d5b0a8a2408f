"""C004 missing-inference-mode: a model runs inference with autograd on.

What it detects:
    A torch model forward (``model(x)``, ``self.model(x)``, ``model.forward(x)``, ``model.get_text_features(x)``,
    ``model.encode_image(x)``) in PyTorch code, outside ``torch.no_grad()``/``torch.inference_mode()`` (as a
    ``with`` block, a decorator, an enclosing function that has either, or a project's own decorator that applies
    one, such as ``@smart_inference_mode()``), in an inference context: a request handler (web routes, Ray Serve,
    TorchServe/LitServe/BentoML/KServe handler methods, also a plain class with ``initialize``/``handle``), a
    function whose name says inference (``predict``, ``infer``, ``evaluate``, ``serve``, ``validate``,
    ``classify``, ``embed`` ...), a scope that called ``.eval()`` on that model, or a script that never trains
    (a file with ``if __name__ == "__main__":`` and no ``.backward()``, optimizer step or trainer anywhere:
    every forward in it, module level included, is inference).

Why it matters:
    With autograd on, every forward records the graph and keeps activations alive for a backward pass that never
    comes: more memory (often 2x or more) and slower kernels. ``inference_mode`` also skips version counting.

How it is measured:
    Statically; the verdict for a function is taken when the function ends (so a ``.backward()`` after the
    forward counts), for scripts at the end of the file. What is a model is resolved from assignments
    (:mod:`infradoctor.scan.values`): an ``nn.Module`` subclass or instance, ``from_pretrained`` of a model class,
    ``torch.jit.load``/``torch.compile`` results; an unresolved name counts when named like a model. Not reported:
    functions that train; pydantic models, tokenizers, processors and lambdas; HF ``pipeline``, diffusers
    pipelines, ``SentenceTransformer`` and other wrappers that disable autograd themselves (and ``generate``,
    which does too); calls whose result is thrown away (a warm-up); the model's own layers called in its
    methods (grad mode belongs to the caller); LightningModule ``validation_step``/``test_step``/``predict_step``
    (the Trainer disables grad); a function whose every call in the file runs under ``no_grad`` (a
    ``get_logits`` helper of a ``@torch.no_grad()`` evaluation loop); a scope that calls ``model.train()`` on
    purpose; ``hubconf.py`` (torch.hub entry points); a dry run whose result is thrown away (``model(x)`` as a
    statement, ``_ = model(x)``); a forward next to an export or conversion (``torch.onnx.export``,
    ``torch.jit.trace``, ``tf.lite.TFLiteConverter``, ``ov.convert_model``, ``onnx.save``, ``coremltools.convert``)
    outside a loop, which runs once for shapes or to check the converted model.

    Reported at info severity: it is right on the scan corpus after the fixes (9 of 9), but on code it had not
    seen (the two held-out first passes) 1 of its 3 hits was right.

Fix:
    Wrap the inference in ``with torch.inference_mode():`` or decorate the function with
    ``@torch.inference_mode()`` (``torch.no_grad()`` where tensors are reused in autograd later).
"""

from __future__ import annotations

from infradoctor.findings import Rule, Severity
from infradoctor.scan import knowledge as K
from infradoctor.scan import values as V
from infradoctor.scan.context import CallInfo, FileContext, Hit, Scope

RULE = Rule(
    "C004",
    "missing-inference-mode",
    Severity.INFO,
    "Model inference without no_grad/inference_mode",
    fix="Wrap inference in torch.inference_mode() (or decorate the function with it).",
    risk="Tensors made under inference_mode cannot be used in autograd later.",
    commands=("scan",),
)


def check_model_call(call: CallInfo, ctx: FileContext) -> None:
    """Remember a forward made with autograd on; judged when the function (or the file) ends."""
    scope = ctx.scope
    if not call.forward or call.model not in (V.MODEL, V.NAMED) or not ctx.uses_torch or scope.no_grad or (
            call.discarded or scope.in_module_class or scope.test):
        return
    key = call.held_key
    if not key:
        return
    pending: list[tuple[str, Hit, bool]] = scope.data.setdefault(RULE.code, [])
    if any(k == key for k, _, _ in pending):
        return
    what = f"{key}(...)" if call.key == key else f"{key}.{call.name}(...)"
    hit = ctx.make_hit(
        RULE.code,
        call.node,
        f"{what} runs with autograd on; wrap inference in torch.inference_mode()",
        {"model": key},
    )
    pending.append((key, hit, bool(ctx.loops)))


def check_local_call(call: CallInfo, ctx: FileContext) -> None:
    """Note whether each call of a function of this file runs with autograd off."""
    if call.callee_fn is None:
        return
    callers: dict[int, list[bool]] = ctx.data.setdefault(RULE.code + ":callers", {})
    callers.setdefault(id(call.callee_fn.node), []).append(ctx.scope.no_grad)


def scope_end(scope: Scope, ctx: FileContext) -> None:
    """Classify the remembered forwards of a function that does not train; judged at the end of the file."""
    pending: list[tuple[str, Hit, bool]] | None = scope.data.get(RULE.code)
    if not pending or scope.trains or scope.train_mode:
        return
    short = scope.name.rsplit(".", 1)[-1].lower()
    named = scope.kind != "module" and K.INFERENCE_FUNCTION_RE.search(short) is not None
    held: list[tuple[Scope, Hit, str | None]] = ctx.data.setdefault(RULE.code, [])
    for key, hit, in_loop in pending:
        if scope.exports and not in_loop:
            continue  # a forward for shapes before an export
        if scope.handler is not None:
            hit.evidence["handler"] = scope.handler
            held.append((scope, hit, "context"))
        elif named:
            hit.evidence["inference_function"] = scope.name
            held.append((scope, hit, "context"))
        elif key in scope.eval_keys:
            hit.evidence["eval_called"] = True
            held.append((scope, hit, "context"))
        else:
            held.append((scope, hit, None))


def file_end(ctx: FileContext) -> None:
    """Report forwards in inference contexts (in a script that never trains, all of them).

    Not those whose function is called in this file only with autograd off (a ``get_logits`` helper called only
    from a ``@torch.no_grad()`` function).
    """
    callers: dict[int, list[bool]] = ctx.data.get(RULE.code + ":callers", {})
    if ctx.path.replace("\\", "/").rsplit("/", 1)[-1] == "hubconf.py":
        return  # torch.hub entry points: the hub's user runs the model, and its mode
    script = not ctx.trains and ctx.index.main_guard
    for scope, hit, why in ctx.data.get(RULE.code, []):
        seen = callers.get(id(scope.node)) if scope.node is not None else None
        if seen and all(seen):
            continue
        if why is not None:
            ctx.hits.append(hit)
        elif scope.kind in ("def", "async") and (scope.handler is not None or ctx.is_registered(scope)):
            hit.evidence.setdefault("handler", "registered route")
            ctx.hits.append(hit)
        elif script and not ctx.exports:  # an export script's forwards are for shapes
            hit.evidence["script_never_trains"] = True
            ctx.hits.append(hit)
