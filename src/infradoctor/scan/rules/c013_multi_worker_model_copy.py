"""C013 multi-worker-model-copy: several server workers each load their own copy of a GPU model.

What it detects:
    A file that starts a server with more than one worker process (``uvicorn.run(..., workers=N)`` or
    ``uvicorn.Config(..., workers=N)`` with N > 1 or not a literal) and puts a model on the GPU
    (``model.cuda()``, ``model.to("cuda")``, ``.to(device)`` with a CUDA device, a load with ``device="cuda"`` or
    ``device_map=...``).

Why it matters:
    Each worker process imports the app and loads the model: N copies of the weights on the same GPU, N CUDA
    contexts (hundreds of MB each), and kernels from N processes time-sliced on one device. Memory runs out at
    small N and latency rises (S004 at run time).

How it is measured:
    Statically, within one file: worker counts from the server call's keywords; GPU placement from calls on
    model-like names. An app started from another file (``"pkg.main:app"``), gunicorn configuration files and
    command lines are not followed.

Fix:
    One worker per GPU with request batching inside it (or a model server such as Triton, TorchServe, vLLM,
    Ray Serve with ``num_gpus``), and scale with more GPUs/replicas; or share weights (preload + fork).
"""

from __future__ import annotations

import ast

from infradoctor.scan.visitor import CallInfo, FileContext, Hit, is_model_name

CODE = "C013"
CALL_NAMES = frozenset({"run", "Config", "cuda", "to"})


def check(call: CallInfo, ctx: FileContext) -> None:
    """Collect worker counts and GPU placement of models."""
    state: dict[str, list[Hit]] = ctx.data.setdefault(CODE, {"servers": [], "gpu": []})
    node = call.node
    if call.name in ("run", "Config") and call.qualname in ("uvicorn.run", "uvicorn.Config"):
        kw = call.keyword("workers")
        if kw is None:
            return
        value = kw.value
        if isinstance(value, ast.Constant) and isinstance(value.value, int) and value.value <= 1:
            return
        workers = str(value.value) if isinstance(value, ast.Constant) else ast.unparse(value)
        state["servers"].append(ctx.make_hit(
            CODE, node, f"{call.qualname}(workers={workers}) starts several processes and each loads its own copy "
            "of the GPU model", {"workers": workers}))
    elif call.name in ("cuda", "to") and _on_model(call, ctx) and (
            call.name == "cuda" or any(ctx.is_cuda_expr(a) for a in node.args) or any(
                kw.arg == "device" and ctx.is_cuda_expr(kw.value) for kw in node.keywords)):
        state["gpu"].append(ctx.make_hit(CODE, node, "", {}))


def _on_model(call: CallInfo, ctx: FileContext) -> bool:
    """The call's receiver (or the name it is assigned to) is a model."""
    if any(is_model_name(key) or key in ctx.model_vars for key in call.assigned_to):
        return True
    if call.receiver_key is not None and ctx.is_model_expr(call.receiver):
        return True
    return isinstance(call.receiver, ast.Call) and _is_model_build(call.receiver, ctx)


def _is_model_build(node: ast.Call, ctx: FileContext) -> bool:
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    return name in ("from_pretrained",) or name in ctx.model_classes


def check_model_load(call: CallInfo, ctx: FileContext) -> None:
    """A load that places the model on the GPU directly (``device="cuda"``, ``device_map="auto"``)."""
    state: dict[str, list[Hit]] = ctx.data.setdefault(CODE, {"servers": [], "gpu": []})
    for kw in call.node.keywords:
        if (kw.arg == "device" and ctx.is_cuda_expr(kw.value)) or kw.arg == "device_map":
            state["gpu"].append(ctx.make_hit(CODE, call.node, "", {}))


def file_end(ctx: FileContext) -> None:
    """Report multi-worker servers in files that put a model on the GPU."""
    state: dict[str, list[Hit]] | None = ctx.data.get(CODE)
    if not state or not state["gpu"]:
        return
    for hit in state["servers"]:
        hit.evidence["gpu_model_line"] = state["gpu"][0].line
        ctx.hits.append(hit)
