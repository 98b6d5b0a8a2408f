"""What a call means: a training step, a sign of CUDA, model work, a model load, the function it runs, a route.

:func:`classify` fills a :class:`~infradoctor.scan.context.CallInfo` once per call site, before the rules see it,
and notes on the :class:`~infradoctor.scan.context.FileContext` what the call says about the file.
"""

from __future__ import annotations

import ast

from infradoctor.scan import knowledge as K
from infradoctor.scan import values as V
from infradoctor.scan.context import CallInfo, FileContext, Scope
from infradoctor.scan.index import FunctionInfo
from infradoctor.scan.syntax import dotted, is_model_name, names_in, subscript_key

__all__ = ["assigned_kind", "classify", "classify_model_call", "model_load_kind"]


def classify(call: CallInfo, ctx: FileContext) -> None:
    """What the call means for the rules (training, CUDA, model work, loads, the callee).

    Notes on the file what the call says about it: it trains, uses CUDA, exports, registers routes.
    """
    scope = ctx.scope
    node = call.node
    name = call.name
    if name is not None:
        _training_signals(call, name, scope, ctx)
        _cuda_signals(call, name, ctx)
    qual = call.qualname
    if qual in K.EXPORTERS:
        scope.exports = ctx.exports = True
    classify_model_call(call, ctx)
    if call.work:
        ctx.mark_hot()
        if call.held_key:
            ctx.called_models.add(call.held_key)
        if not scope.offload:
            scope.summary.work.append((node.lineno, call.held_key or call.key or "model"))
    call.load_kind = model_load_kind(call, ctx)
    if call.load_kind is not None and not scope.guards and not call.load_kind.startswith("build"):
        scope.summary.loads.append((node.lineno, call.load_kind))
    call.callee_fn = _callee(call, ctx)
    if name is not None and (name in K.REGISTER_METHODS or (
            name in ("get", "post", "put", "delete", "patch", "route", "view", "Route", "WebSocketRoute",
                     "APIRoute") and qual in K.ROUTE_FACTORIES)):
        _register_handlers(node, ctx)

def _training_signals(call: CallInfo, name: str, scope: Scope, ctx: FileContext) -> None:
    receiver = (call.receiver_key or "").lower()
    trains = name in K.TRAINING_METHODS or (name == "step" and "optim" in receiver) or (
        name in K.TRAINER_FITS and ("trainer" in receiver or ctx.key_kind(call.receiver_key) == V.ACCELERATOR))
    if trains:
        scope.trains = ctx.trains = True
        ctx.mark_hot(trains=True)
        if name == "backward" and call.receiver is not None:
            scope.backward_names.update(names_in(call.receiver))
    elif name == "eval" and call.receiver_key:
        scope.eval_keys.add(call.receiver_key)
        ctx.eval_keys.add(call.receiver_key)
    elif name == "train" and call.receiver_key and not call.node.keywords:
        ctx.eval_keys.add(call.receiver_key)
        scope.eval_keys.add(call.receiver_key)
        args = call.node.args
        if not args or (isinstance(args[0], ast.Constant) and args[0].value is True):
            scope.train_mode = True

def _cuda_signals(call: CallInfo, name: str, ctx: FileContext) -> None:
    node = call.node
    if ctx.uses_device is None and (name == "cuda" or (name == "to" and node.args and _a_device(
            node.args[0], ctx)) or any(kw.arg == "device" and _a_device(kw.value, ctx) for kw in node.keywords)):
        ctx.uses_device = node.lineno
    if ctx.uses_cuda is not None:
        return
    if name == "cuda" or (name == "to" and node.args and ctx.is_cuda_expr(node.args[0])) or (
            name == "to" and any(kw.arg == "device" and ctx.is_cuda_expr(kw.value) for kw in node.keywords)):
        ctx.note_cuda(node.lineno)
        return
    qual = call.qualname
    if qual is not None and (qual.startswith(("torch.cuda.", "torch.accelerator.")) or qual in
                             K.ACCELERATOR_OBJECTS):
        ctx.note_cuda(node.lineno)
        if ctx.uses_device is None:
            ctx.uses_device = node.lineno
    elif name == "add_argument" and any(
            isinstance(a, ast.Constant) and isinstance(a.value, str) and "device" in a.value for a in node.args
    ) and any(kw.arg == "default" and ctx.is_cuda_expr(kw.value) for kw in node.keywords):
        ctx.note_cuda(node.lineno)  # `--device` defaults to cuda

def _callee(call: CallInfo, ctx: FileContext) -> FunctionInfo | None:
    """The function of this file the call runs: ``helper(...)`` or ``self.method(...)``."""
    func = call.node.func
    index = ctx.index
    if isinstance(func, ast.Name):
        if func.id in index.shadowed:
            return None
        return index.functions.get(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
        cls = ctx.env.cls
        return ctx.values.method(cls, func.attr) if cls is not None else None
    return None


def _register_handlers(node: ast.Call, ctx: FileContext) -> None:
    for arg in node.args:
        if isinstance(arg, ast.Name):
            ctx.registered.add(arg.id)
        elif isinstance(arg, ast.Attribute):
            ctx.registered_methods.add(arg.attr)
    for kw in node.keywords:
        if kw.arg in K.HANDLER_KEYWORDS:
            if isinstance(kw.value, ast.Name):
                ctx.registered.add(kw.value.id)
            elif isinstance(kw.value, ast.Attribute):
                ctx.registered_methods.add(kw.value.attr)



def _a_device(node: ast.expr, ctx: FileContext) -> bool:
    """``x.to(node)`` moves to a device (not a dtype cast, not to the CPU)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value not in ("cpu", "meta")
    key = dotted(node)
    if key is not None:
        qual = ctx.resolve(key)
        if (qual is not None and qual.startswith(("torch.", "numpy."))) or "dtype" in key.lower():
            return False  # torch.float16, a dtype variable
        return ctx.key_kind(key) not in (V.NOT_MODEL, V.HOST) or "device" in key.lower()
    return isinstance(node, (ast.Call, ast.Attribute, ast.Subscript, ast.IfExp))


def classify_model_call(call: CallInfo, ctx: FileContext) -> None:
    """Set ``call.model``/``forward``/``work``/``held_key``: does the call run a model, and which?"""
    node = call.node
    func = node.func
    name = call.name
    if name is None or name in K.PYDANTIC_METHODS:
        return
    if isinstance(func, ast.Attribute):
        receiver_key = dotted(func.value)
        entry = subscript_key(func.value) if receiver_key is None else None
        if entry is not None:  # `request.app["model"].predict(x)`: judged by the key's name alone
            if is_model_name(entry) and name in K.BLOCKING_MODEL_METHODS:
                call.held_key, call.model, call.work = ast.unparse(func.value), V.NAMED, True
            return
        if receiver_key is not None and receiver_key not in ("self", "cls"):
            kind = ctx.key_kind(receiver_key)
            if kind in V.MODEL_KINDS:
                if name in K.HOUSEKEEPING_METHODS:
                    return
                call.held_key, call.model, call.work, call.resolved = receiver_key, kind, True, True
                if kind == V.MODEL and (K.FORWARD_METHOD_RE.match(name) or (
                        is_model_name(name) and not K.FUNCTION_VERB_RE.match(name))) and not (
                        K.NOT_FORWARD_NAME_RE.search(receiver_key.rsplit(".", 1)[-1])):
                    call.forward = bool(node.args or node.keywords)
                return
            if kind == V.NAMED or (kind is None and is_model_name(receiver_key)):
                if name in K.BLOCKING_MODEL_METHODS or K.NAMED_FORWARD_RE.match(name):
                    call.held_key, call.model, call.work = receiver_key, V.NAMED, True
                    call.forward = K.NAMED_FORWARD_RE.match(name) is not None and bool(node.args or node.keywords)
                    return
            elif kind is not None:
                return  # a method of something known not to be a model (a pydantic object, a tokenizer)
    key = call.key
    if key is None and node.args and is_model_name(subscript_key(func)):
        call.held_key, call.model, call.work = ast.unparse(func), V.NAMED, True  # `app.state["model"](x)`
        call.forward = True
        return
    if key is None or not (node.args or node.keywords):
        return
    last = key.rsplit(".", 1)[-1]
    if isinstance(func, ast.Name) and (func.id in ctx.defined or func.id in ctx.aliases):
        return  # a function or class of this file, or an imported one
    kind = ctx.key_kind(key)
    if kind is None:
        if last[:1].isupper() or not is_model_name(key) or K.FUNCTION_VERB_RE.match(last):
            return
        if isinstance(func, ast.Attribute) and "_" in last and dotted(func.value) not in ("self", "cls"):
            return  # `serde.serialize_model(obj)`: a function of another object named after what it takes
        kind = V.NAMED
    if kind in V.MODEL_KINDS or kind == V.NAMED:
        call.held_key, call.model, call.work = key, kind, True
        call.resolved = kind != V.NAMED
        call.forward = kind in (V.MODEL, V.NAMED) and not K.NOT_FORWARD_NAME_RE.search(last)


def model_load_kind(call: CallInfo, ctx: FileContext) -> str | None:
    """What kind of model load or build a call is (``torch.load``, ``from_pretrained``, ``build Net``), or None."""
    name = call.name
    if name is None:
        return None
    func = call.node.func
    if name in K.MODEL_LOADER_METHODS and isinstance(func, ast.Attribute):
        if name in ("from_pretrained", "from_single_file") and ctx.values.pretrained_kind(func.value) == V.NOT_MODEL:
            return None  # a tokenizer or processor: cheap next to the model, and not what C001/C002 are about
        return name
    if isinstance(func, ast.Name) and name in ctx.index.classes and ctx.values.category(name).module:
        return f"build {name}"
    if isinstance(func, ast.Name) and name in K.MODEL_LOADER_FUNCTIONS:
        return name
    qual = call.qualname
    if qual is None:
        return None
    if qual in K.MODEL_LOADERS:
        args = call.node.args
        if qual == "torch.load" and args and isinstance(args[0], ast.Call) and (
                dotted(args[0].func) or "").endswith("BytesIO"):
            return None  # a tensor sent in a request, not a model (C014 reports the unpickling)
        return qual
    if qual in K.MODEL_PRODUCERS:
        return f"build {qual}"
    if qual.startswith(K.MODEL_LOADER_PREFIXES) and "Weights" not in qual and name[:1].islower():
        pretrained = any(kw.arg in ("weights", "pretrained") and not (
            isinstance(kw.value, ast.Constant) and kw.value.value in (None, False)) for kw in call.node.keywords)
        return qual if pretrained else f"build {qual}"
    return None


def assigned_kind(value: ast.expr, call: CallInfo | None, ctx: FileContext) -> str | None:
    """What an assigned value holds here (``call``: the value's own call, classified).

    A model's output carries the autograd graph only where autograd is on.
    """
    if call is not None and call.node is value and call.work and call.model in (V.MODEL, V.NAMED):
        return None if ctx.scope.no_grad else V.OUTPUT
    if isinstance(value, ast.BinOp):
        return V.LOSS if _carries_loss(value, ctx) and not ctx.scope.no_grad else None
    kind = ctx.kind_of(value)
    if kind in V.GRAPH_KINDS and ctx.scope.no_grad:
        return None
    return kind

def _carries_loss(node: ast.AST, ctx: FileContext) -> bool:
    kinds = ctx.scope.kinds
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and kinds.get(sub.id) == V.LOSS:
            return True
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in K.DETACHERS:
            return False
    return False
