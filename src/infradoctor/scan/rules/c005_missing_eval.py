"""C005 missing-eval: weights are loaded into a model that is never switched to ``eval()``.

What it detects:
    In PyTorch code that does not train (no ``.backward()``, optimizer step, trainer ``fit`` or LightningModule
    with ``training_step``/``configure_optimizers`` in the file), a model whose weights are
    loaded (``model.load_state_dict(...)``, ``model = torch.load(...)``, a pretrained torchvision builder) and
    that is then called (``model(x)``, ``.forward``, ``.generate``), with no ``model.eval()`` /
    ``model.train(False)`` / ``model.train()`` anywhere in the file. ``load_state_dict`` counts when its argument
    comes from a file (``torch.load``, safetensors' ``load_file``, or a name assigned from one), not when it copies
    another model's state. HF ``from_pretrained`` models are already in eval mode, and ``torch.hub.load`` returns
    whatever mode the hub entry point sets; neither is reported.

Why it matters:
    A fresh ``nn.Module`` is in training mode: dropout drops activations at random and batch-norm normalises with
    the current batch's statistics and updates its running averages. Predictions are then wrong and
    non-deterministic, and batch-size dependent.

How it is measured:
    Statically, by name across the file: the receiver of ``load_state_dict`` (``model``, ``self.model``), or the
    target of the load assignment, is matched against receivers of ``.eval()``/``.train(...)`` and of calls.
    Models passed to a helper that calls ``eval()`` in another file are not seen (no report, by design); a model
    that is a parameter of the function loading its weights belongs to the caller, which sets its mode; nor are
    ``hubconf.py`` entry points (the hub's user chooses the mode) and test code.

Fix:
    Call ``model.eval()`` after loading the weights (and ``model.train()`` before resuming training).
"""

from __future__ import annotations

import ast

from infradoctor.findings import Rule, Severity
from infradoctor.scan.context import CallInfo, FileContext, Hit, is_model_name, root_key

RULE = Rule(
    "C005",
    "missing-eval",
    Severity.MEDIUM,
    "Loaded model never switched to eval()",
    fix="Call model.eval() after loading weights for inference.",
    risk="None for inference.",
    commands=("scan",),
)

_LOADS = ("load_state_dict", "torch.load")
_WEIGHT_FILES = ("safetensors.torch.load_file", "torch.hub.load_state_dict_from_url")


def _from_a_load(arg: ast.expr, ctx: FileContext, loaded: set[str]) -> bool:
    """The state dict comes from a file, not from another model.

    ``torch.load(...)``, ``load_file(...)``, or a name assigned from one (``m.load_state_dict(ckpt["model"])``).
    """
    for sub in ast.walk(arg):
        if isinstance(sub, ast.Call):
            name = sub.func.attr if isinstance(sub.func, ast.Attribute) else getattr(sub.func, "id", "")
            if name in ("load", "load_file", "load_state_dict_from_url", "load_url"):
                return True
    root = root_key(arg)
    if root is None:
        return False
    return root in loaded or bool(ctx.scope.deps.get(root, set()) & loaded)


def _a_parameter(key: str, ctx: FileContext) -> bool:
    """The model was handed in by the caller (``def load_checkpoint(model, path)``): its mode is the caller's."""
    info = ctx.scope.info
    return info is not None and key.split(".", 1)[0] in info.params and not key.startswith(("self.", "cls."))


def check_model_load(call: CallInfo, ctx: FileContext) -> None:
    """Remember loads of weights into a named model."""
    if not ctx.uses_torch:
        return
    kind = call.load_kind or ""
    keys: list[str] = []
    loaded: set[str] = ctx.data.setdefault(RULE.code + ":loaded", set())
    if kind == "load_state_dict" and call.receiver_key:
        if call.node.args and _from_a_load(call.node.args[0], ctx, loaded) and not _a_parameter(
                call.receiver_key, ctx):
            keys = [call.receiver_key]
    elif kind in _LOADS or kind.startswith("torchvision.models.") or kind in _WEIGHT_FILES:
        loaded.update(call.assigned_to)
        keys = [k for k in call.assigned_to if kind not in _WEIGHT_FILES and (
            is_model_name(k) or kind != "torch.load")]
    pending: dict[str, Hit] = ctx.data.setdefault(RULE.code, {})
    for key in keys:
        if key not in pending:
            pending[key] = ctx.make_hit(
                RULE.code,
                call.node,
                f"weights loaded into `{key}` but `{key}.eval()` is never called; dropout and batch-norm stay in "
                "training mode",
                {"model": key, "load": kind},
            )


def file_end(ctx: FileContext) -> None:
    """Report loaded models that are called and never put in eval (or train) mode."""
    pending: dict[str, Hit] = ctx.data.get(RULE.code, {})
    if ctx.trains or ctx.path.replace("\\", "/").rsplit("/", 1)[-1] == "hubconf.py":
        return
    for key, hit in pending.items():
        if key not in ctx.eval_keys and key in ctx.called_models:
            ctx.hits.append(hit)
