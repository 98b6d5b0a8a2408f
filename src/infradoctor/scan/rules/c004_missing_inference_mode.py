"""C004 missing-inference-mode: a model runs inference with autograd on.

What it detects:
    A model forward (``model(x)``, ``self.model(x)``, ``model.forward(x)``) in PyTorch code, outside
    ``torch.no_grad()``/``torch.inference_mode()`` (as a ``with`` block, a decorator, or an enclosing function that
    has either), in an inference context: a request handler, a function whose name says inference
    (``predict``, ``infer``, ``evaluate``, ``generate``, ``serve``, ``validate``, ``classify``, ``embed`` ...), or a
    scope that called ``.eval()`` on that model. Functions that train (``.backward()``, ``zero_grad()``, an
    optimizer ``step()``) are not reported, nor are HF ``pipeline``/``SentenceTransformer`` objects, which
    disable autograd themselves, nor calls whose result is thrown away (``model(x)`` as a statement: a warm-up or
    calibration run whose graph is freed at once).

Why it matters:
    With autograd on, every forward records the graph and keeps activations alive for a backward pass that never
    comes: more memory (often 2x or more) and slower kernels. ``inference_mode`` also skips version counting.

How it is measured:
    Statically: the visitor tracks with-blocks, decorators and nesting; the verdict for a function is taken when
    the function ends (so a ``.backward()`` after the forward counts), and for functions registered as routes by
    a call elsewhere, at the end of the file.

Fix:
    Wrap the inference in ``with torch.inference_mode():`` or decorate the function with
    ``@torch.inference_mode()`` (``torch.no_grad()`` where tensors are reused in autograd later).
"""

from __future__ import annotations

from infradoctor.findings import Rule, Severity
from infradoctor.scan import knowledge as K
from infradoctor.scan.visitor import CallInfo, FileContext, Hit, Scope

RULE = Rule(
    "C004",
    "missing-inference-mode",
    Severity.MEDIUM,
    "Model inference without no_grad/inference_mode",
    fix="Wrap inference in torch.inference_mode() (or decorate the function with it).",
    risk="Tensors made under inference_mode cannot be used in autograd later.",
    commands=("scan",),
)


def check_model_call(call: CallInfo, ctx: FileContext) -> None:
    """Remember a forward made with autograd on; judged when the function ends."""
    if not ctx.uses_torch or ctx.scope.no_grad or call.discarded:
        return
    key = call.key if call.name != "forward" else call.receiver_key
    if not key or key in ctx.pipeline_vars:
        return
    pending: list[tuple[str, Hit]] = ctx.scope.data.setdefault(RULE.code, [])
    if any(k == key for k, _ in pending):
        return
    hit = ctx.make_hit(
        RULE.code,
        call.node,
        f"{key}(...) runs with autograd on; wrap inference in torch.inference_mode()",
        {"model": key},
    )
    pending.append((key, hit))


def scope_end(scope: Scope, ctx: FileContext) -> None:
    """Report the remembered forwards of an inference function that does not train."""
    pending: list[tuple[str, Hit]] | None = scope.data.get(RULE.code)
    if not pending or scope.trains:
        return
    short = scope.name.rsplit(".", 1)[-1].lower()
    named = K.INFERENCE_FUNCTION_RE.search(short) is not None
    for key, hit in pending:
        if scope.handler is not None or named or key in scope.eval_keys:
            if scope.handler is not None:
                hit.evidence["handler"] = scope.handler
            elif named:
                hit.evidence["inference_function"] = scope.name
            else:
                hit.evidence["eval_called"] = True
            ctx.hits.append(hit)
        else:
            ctx.report_if_handler(scope, hit)
