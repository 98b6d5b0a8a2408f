"""The one pass over a file's syntax tree that every scan rule shares.

:class:`FileVisitor` walks the tree once. On the way it keeps what rules need to know about the place they look
at: import aliases (``import torch as t``), the scope stack (module, class, def, async def, lambda), loops, whether
autograd is off (``with torch.no_grad():``, ``@torch.inference_mode()``, inherited by nested functions), whether a
call runs in a worker thread (arguments of ``asyncio.to_thread``/``run_in_executor``/``submit``), which functions
are request handlers (route decorators, Ray Serve deployments, functions registered with ``add_route`` and
friends), and simple data flow inside a function (which names hold a model, a model output, a loss, pinned data).

Rules are modules under :mod:`infradoctor.scan.rules`; they subscribe to events (a call with a given method
name, a model call, the end of a loop, of a function, of the file) and report hits through :meth:`FileContext.report`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from infradoctor.scan import knowledge as K

_AST = ast.AST


@dataclass
class Edit:
    """A safe text insertion at a position (1-based line, 0-based UTF-8 byte column)."""

    line: int
    """1-based line."""
    byte_col: int
    """0-based UTF-8 byte offset in the line."""
    text: str
    """Text to insert."""
    description: str
    """What the edit does, for the fix report."""


@dataclass
class Hit:
    """A rule's raw report, before suppression and configuration are applied."""

    code: str
    """Rule code."""
    line: int
    """1-based line."""
    byte_col: int
    """0-based UTF-8 byte offset of the node."""
    end_line: int
    """1-based end line."""
    end_byte_col: int
    """0-based UTF-8 byte offset where the node ends."""
    message: str
    """One-line message."""
    evidence: dict[str, Any]
    """What the rule saw."""
    function: str | None
    """Enclosing function's qualified name, or None at module level."""
    edit: Edit | None = None
    """A safe fix, when the rule has one."""
    requires: tuple[str, str] | None = None
    """Cross-file: (fact, dotted module) -- the hit counts only if a scanned file that is that module provides
    that fact (see ``FileContext.facts``); its value is added to the evidence."""


@dataclass
class LoopFrame:
    """A ``for``/``while`` loop or comprehension being visited."""

    node: _AST
    """The loop node."""
    targets: set[str]
    """Names bound by the loop header (``for x, y in ...``)."""
    iter_key: str | None
    """Dotted name of the iterable's root (``loader`` for ``enumerate(loader)``), when simple."""
    assigned: set[str] = field(default_factory=set)
    """Names assigned inside the loop so far."""
    unpacked: bool = False
    """The header unpacks each item (``for x, y in data``) without enumerate/zip: items are tuples (batches)."""
    hot: bool = False
    """The loop runs model calls or training steps (a hot loop)."""
    pending: list[Hit] = field(default_factory=list)
    """Hits that count only if the loop turns out hot."""


@dataclass
class Scope:
    """A module, class, function or lambda being visited."""

    kind: str
    """``module``, ``class``, ``def``, ``async`` or ``lambda``."""
    name: str
    """Qualified name (``Predictor.__call__``)."""
    node: _AST | None
    """The defining node."""
    parent: Scope | None
    """The enclosing scope."""
    grad_disabled: int = 0
    """> 0 while autograd is off here (decorator, enclosing with-block or enclosing function)."""
    handler: str | None = None
    """Framework name when a decorator or class makes this a request handler."""
    deployment: bool = False
    """Class scope: a Ray Serve deployment."""
    loops: list[LoopFrame] = field(default_factory=list)
    """Open loops in this function (a nested function starts with none)."""
    guards: int = 0
    """> 0 inside ``if x is None:``-style guards (lazy initialisation)."""
    modulo_guards: int = 0
    """> 0 inside ``if step % N == 0:`` (periodic logging)."""
    offload: int = 0
    """> 0 inside the arguments of a call that runs its callable in a thread."""
    trains: bool = False
    """The function calls ``.backward()``, ``zero_grad()`` or an optimizer step."""
    values: dict[str, str] = field(default_factory=dict)
    """Name -> ``model_output`` / ``loss`` for values that carry the autograd graph."""
    pinned: set[str] = field(default_factory=set)
    """Names that hold pinned host memory."""
    deps: dict[str, set[str]] = field(default_factory=dict)
    """Name -> names its assigned value was computed from (one level)."""
    backward_names: set[str] = field(default_factory=set)
    """Names in the receivers of ``.backward()`` calls."""
    eval_keys: set[str] = field(default_factory=set)
    """Receivers of ``.eval()`` in this scope."""
    data: dict[str, Any] = field(default_factory=dict)
    """Rule-private state, keyed by rule code."""

    @property
    def is_function(self) -> bool:
        """A def, async def or lambda (not a module or class)."""
        return self.kind in ("def", "async", "lambda")

    @property
    def in_async(self) -> bool:
        """Code here runs on the event loop: the innermost function is ``async def``."""
        return self.kind == "async"

    @property
    def no_grad(self) -> bool:
        """Autograd is off here."""
        return self.grad_disabled > 0


class CallInfo:
    """A call site, with what rules ask about it computed once."""

    __slots__ = ("node", "name", "key", "receiver", "receiver_key", "awaited", "model_call", "load_kind",
                 "assigned_to", "outer_method", "discarded", "_ctx", "_qual")

    def __init__(self, node: ast.Call, ctx: FileContext, awaited: bool) -> None:
        self.node = node
        func = node.func
        self.receiver: ast.expr | None = func.value if isinstance(func, ast.Attribute) else None
        self.name: str | None = func.attr if isinstance(func, ast.Attribute) else (
            func.id if isinstance(func, ast.Name) else None)
        if isinstance(func, ast.Name) and func.id in ctx.aliases:  # `from torch import load as tl`: name is load
            self.name = ctx.aliases[func.id].rsplit(".", 1)[-1]
        self.key = dotted(func)
        self.receiver_key = root_key(self.receiver) if self.receiver is not None else None
        self.awaited = awaited
        self.model_call = False
        self.load_kind: str | None = None
        self.assigned_to: list[str] = []
        self.discarded = False
        """The call is a statement of its own: its result is thrown away (``model(x)`` as a warm-up)."""
        self.outer_method: str | None = None
        """Method called on this call's result (``parameters`` for ``m.cpu().parameters()``)."""
        self._ctx = ctx
        self._qual: str | None | bool = False

    @property
    def qualname(self) -> str | None:
        """Fully qualified callee (``torch.load``) after alias resolution, or None when not imported."""
        if self._qual is False:
            self._qual = self._ctx.resolve(self.key) if self.key else None
        return self._qual  # type: ignore[return-value]

    def keyword(self, name: str) -> ast.keyword | None:
        """The keyword argument ``name=...``, if given."""
        for kw in self.node.keywords:
            if kw.arg == name:
                return kw
        return None

    @property
    def has_star_kwargs(self) -> bool:
        """``**kwargs`` is passed (any keyword may be in it)."""
        return any(kw.arg is None for kw in self.node.keywords)


def dotted(node: ast.AST | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def root_key(node: ast.AST | None) -> str | None:
    """Dotted name of the value a method chain starts from: ``model`` for ``model.to(dev).half()``/``x[0]``."""
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return dotted(node)


def names_in(node: ast.AST) -> set[str]:
    """Every plain name read in an expression."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def is_model_name(key: str | None) -> bool:
    """A dotted name that reads as a model (``model``, ``self.model``, ``text_encoder``)."""
    if not key:
        return False
    last = key.rsplit(".", 1)[-1].lower()
    return last not in K.NOT_MODEL_NAMES and K.MODEL_NAME_RE.match(last) is not None


def mentions_cuda(node: ast.AST) -> bool:
    """A string constant containing ``cuda`` appears in the expression."""
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and "cuda" in n.value for n in ast.walk(node))


RuleHook = Callable[..., None]


@dataclass
class RuleSet:
    """Enabled rules, indexed by the events they subscribe to."""

    by_call_name: dict[str, list[RuleHook]] = field(default_factory=dict)
    on_model_call: list[RuleHook] = field(default_factory=list)
    on_model_load: list[RuleHook] = field(default_factory=list)
    on_node: dict[type, list[RuleHook]] = field(default_factory=dict)
    on_loop_end: list[RuleHook] = field(default_factory=list)
    on_scope_end: list[RuleHook] = field(default_factory=list)
    on_file_end: list[RuleHook] = field(default_factory=list)
    codes: frozenset[str] = frozenset()

    @classmethod
    def from_modules(cls, modules: Iterable[ModuleType]) -> RuleSet:
        """Index rule modules by the hooks they define.

        Hooks: ``CALL_NAMES`` + ``check``, ``check_model_call``, ``check_model_load``, ``NODES`` + ``check_node``,
        ``loop_end``, ``scope_end``, ``file_end``.
        """
        rules = cls()
        codes: set[str] = set()
        for module in modules:
            codes.add(module.RULE.code)
            check = getattr(module, "check", None)
            if check is not None:
                for name in module.CALL_NAMES:
                    rules.by_call_name.setdefault(name, []).append(check)
            for attr, target in (("check_model_call", rules.on_model_call),
                                 ("check_model_load", rules.on_model_load), ("loop_end", rules.on_loop_end),
                                 ("scope_end", rules.on_scope_end), ("file_end", rules.on_file_end)):
                hook = getattr(module, attr, None)
                if hook is not None:
                    target.append(hook)
            node_hook = getattr(module, "check_node", None)
            if node_hook is not None:
                for node_type in module.NODES:
                    rules.on_node.setdefault(node_type, []).append(node_hook)
        rules.codes = frozenset(codes)
        return rules


@dataclass
class PendingHandlerHit:
    """A hit that counts only if its function turns out to be a request handler."""

    scope: Scope
    hit: Hit


class FileContext:
    """What rules can ask about the file and the place being visited; where they report."""

    def __init__(self, path: str, rules: RuleSet) -> None:
        self.path = path
        self.rules = rules
        self.aliases: dict[str, str] = {}
        """Local name -> qualified name, from imports."""
        self.facts: dict[str, Any] = {}
        """What this file tells rules looking from other files (``C013.gpu_model_line``): see ``Hit.requires``."""
        self.defined: set[str] = set()
        """Names defined by def/class at any level (shadowing builtins like ``open``)."""
        self.uses_torch = False
        """The file imports torch or a library built on it."""
        self.frameworks: set[str] = set()
        """Web frameworks the file imports."""
        self.app_vars: dict[str, str] = {}
        """Variable -> constructor for apps and routers (``app = FastAPI()``)."""
        self.model_vars: set[str] = set()
        """Dotted names assigned from a model-producing call anywhere in the file."""
        self.pipeline_vars: set[str] = set()
        """Dotted names assigned from a wrapper that already disables autograd (HF pipeline)."""
        self.model_classes: set[str] = set()
        """Classes defined in the file that subclass nn.Module (or similar)."""
        self.cuda_names: set[str] = set()
        """Names assigned an expression that mentions ``cuda`` (``device = "cuda" if ... else "cpu"``)."""
        self.uses_cuda: int | None = None
        """Line of the first sign of CUDA use (``.cuda()``, ``"cuda"`` device), or None."""
        self.registered: set[str] = set()
        """Function names registered as handlers through a call (``app.add_route("/", handler)``)."""
        self.pinned_loaders: set[str] = set()
        """Names bound to ``DataLoader(..., pin_memory=True)``."""
        self.eval_keys: set[str] = set()
        """Receivers of ``.eval()``/``.train(...)`` anywhere in the file (and targets of ``x = m.eval()``)."""
        self.called_models: set[str] = set()
        """Dotted names of models called anywhere in the file."""
        self.trains = False
        """Some function in the file calls ``.backward()`` or steps an optimizer."""
        self.hits: list[Hit] = []
        self.pending_handler: list[PendingHandlerHit] = []
        self.scope: Scope = Scope("module", "<module>", None, None)
        self.data: dict[str, Any] = {}
        """Rule-private file-wide state, keyed by rule code."""
        self.current_call: CallInfo | None = None

    # -- name resolution --------------------------------------------------------------------------------
    def resolve(self, key: str | None) -> str | None:
        """Qualified name of a dotted name through import aliases; builtins as ``builtins.X``; else None."""
        if not key:
            return None
        head, _, rest = key.partition(".")
        target = self.aliases.get(head)
        if target is None:
            if not rest and head in ("open", "input", "print") and head not in self.defined:
                return f"builtins.{head}"
            return None
        return f"{target}.{rest}" if rest else target

    def resolve_expr(self, node: ast.AST | None) -> str | None:
        """Qualified name of a Name/Attribute expression, or of a called decorator (``@torch.no_grad()``)."""
        if isinstance(node, ast.Call):
            node = node.func
        return self.resolve(dotted(node))

    def is_model_expr(self, node: ast.AST | None) -> bool:
        """The expression names a model: assigned from a model producer in this file, or named like one."""
        key = dotted(node)
        if key is None:
            return False
        return key in self.model_vars or is_model_name(key)

    def is_model_callee(self, func: ast.Name | ast.Attribute) -> bool:
        """A called expression is a model forward (not a class or a function defined or imported here)."""
        key = dotted(func)
        if key is None:
            return False
        if key in self.model_vars:
            return True
        last = key.rsplit(".", 1)[-1]
        if last[:1].isupper():
            return False
        if isinstance(func, ast.Name) and func.id in self.defined:
            return False
        return is_model_name(key) and not K.FUNCTION_VERB_RE.match(last)

    def is_cuda_expr(self, node: ast.AST | None) -> bool:
        """A device expression that means CUDA: ``"cuda:0"``, ``torch.device("cuda")``, a name assigned one."""
        if node is None:
            return False
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and "cuda" in node.value
        key = dotted(node)
        if key is not None:
            return key in self.cuda_names
        if isinstance(node, ast.Call):
            return self.resolve_expr(node.func) == "torch.device" and any(mentions_cuda(a) for a in node.args)
        return False

    # -- places -------------------------------------------------------------------------------------------
    @property
    def function(self) -> Scope:
        """The innermost function scope (or the module/class scope at top level)."""
        return self.scope

    @property
    def loops(self) -> list[LoopFrame]:
        """Open loops of the current function."""
        return self.scope.loops

    def mark_hot(self) -> None:
        """Every open loop of the current function runs model work."""
        for frame in self.scope.loops:
            frame.hot = True

    # -- reporting ----------------------------------------------------------------------------------------
    def make_hit(self, code: str, node: ast.AST, message: str, evidence: dict[str, Any] | None = None,
                 edit: Edit | None = None) -> Hit:
        """A hit at a node, in the current function."""
        fn = self.scope
        while fn is not None and not fn.is_function:
            fn = fn.parent  # type: ignore[assignment]
        line = getattr(node, "lineno", 1)
        return Hit(
            code=code,
            line=line,
            byte_col=getattr(node, "col_offset", 0),
            end_line=getattr(node, "end_lineno", None) or line,
            end_byte_col=getattr(node, "end_col_offset", None) or 0,
            message=message,
            evidence=dict(evidence or {}),
            function=fn.name if fn is not None else None,
            edit=edit,
        )

    def report(self, code: str, node: ast.AST, message: str, evidence: dict[str, Any] | None = None,
               edit: Edit | None = None) -> None:
        """Report a hit now."""
        self.hits.append(self.make_hit(code, node, message, evidence, edit))

    def report_if_handler(self, scope: Scope, hit: Hit) -> None:
        """Report ``hit`` at the end of the file if ``scope`` is a request handler by then."""
        if scope.handler is not None:
            hit.evidence.setdefault("handler", scope.handler)
            self.hits.append(hit)
        elif scope.kind in ("def", "async"):
            self.pending_handler.append(PendingHandlerHit(scope, hit))

    def resolve_pending(self) -> None:
        """At the end of the file: keep pending hits whose function was registered as a route."""
        for pending in self.pending_handler:
            short = pending.scope.name.rsplit(".", 1)[-1]
            if short in self.registered:
                pending.hit.evidence.setdefault("handler", "registered route")
                self.hits.append(pending.hit)
        self.pending_handler.clear()


_GUARD_OPS = (ast.Is, ast.IsNot, ast.In, ast.NotIn)


class FileVisitor:
    """Walks one module once, keeping :class:`FileContext` current and dispatching events to rules."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.rules = ctx.rules
        self._awaited: ast.AST | None = None
        self._assign: tuple[ast.AST, list[str]] | None = None
        self._receiver_of: tuple[ast.AST, str] | None = None
        self._discarded: ast.AST | None = None
        self._dispatch: dict[type, Callable[[Any], None]] = {
            ast.Import: self.visit_import, ast.ImportFrom: self.visit_import_from,
            ast.FunctionDef: self.visit_function, ast.AsyncFunctionDef: self.visit_function,
            ast.Lambda: self.visit_lambda, ast.ClassDef: self.visit_class,
            ast.For: self.visit_for, ast.AsyncFor: self.visit_for, ast.While: self.visit_while,
            ast.ListComp: self.visit_comprehension, ast.SetComp: self.visit_comprehension,
            ast.GeneratorExp: self.visit_comprehension, ast.DictComp: self.visit_comprehension,
            ast.With: self.visit_with, ast.AsyncWith: self.visit_with, ast.If: self.visit_if,
            ast.Assign: self.visit_assign, ast.AnnAssign: self.visit_assign, ast.AugAssign: self.visit_augassign,
            ast.Await: self.visit_await, ast.Call: self.visit_call, ast.Expr: self.visit_expr,
            ast.Name: _noop, ast.Constant: _noop, ast.Pass: _noop, ast.Global: _noop, ast.Nonlocal: _noop,
            ast.Load: _noop, ast.Store: _noop, ast.Del: _noop, ast.alias: _noop,
        }
        self._fields: dict[type, tuple[str, ...]] = {}

    # -- traversal ----------------------------------------------------------------------------------------
    def run(self, tree: ast.Module) -> list[Hit]:
        """Visit the module; fire end-of-file hooks; return the hits."""
        ctx = self.ctx
        ctx.scope = Scope("module", "<module>", tree, None)
        for stmt in tree.body:  # functions and classes may be used above their definition
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                ctx.defined.add(stmt.name)
        self.visit_body(tree.body)
        self.end_scope(ctx.scope)
        for hook in self.rules.on_file_end:
            hook(ctx)
        ctx.resolve_pending()
        return ctx.hits

    def visit(self, node: ast.AST) -> None:
        handler = self._dispatch.get(node.__class__)
        if handler is not None:
            handler(node)
        else:
            self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        cls = node.__class__
        fields = self._fields.get(cls)
        if fields is None:
            fields = tuple(f for f in cls._fields if f not in ("ctx", "type_comment", "kind"))
            self._fields[cls] = fields
        node_hooks = self.rules.on_node.get(cls)
        if node_hooks:
            for hook in node_hooks:
                hook(node, self.ctx)
        visit = self.visit
        for name in fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, _AST):
                        visit(item)
            elif isinstance(value, _AST):
                visit(value)

    def visit_body(self, body: Iterable[ast.AST]) -> None:
        visit = self.visit
        for stmt in body:
            visit(stmt)

    def visit_all(self, nodes: Iterable[ast.AST | None]) -> None:
        for node in nodes:
            if node is not None:
                self.visit(node)

    # -- imports ------------------------------------------------------------------------------------------
    def _note_module(self, module: str) -> None:
        root = module.split(".", 1)[0]
        if root in K.TORCH_ROOTS:
            self.ctx.uses_torch = True
        framework = K.WEB_FRAMEWORK_ROOTS.get(root)
        if framework is not None and (root != "ray" or module.startswith("ray.serve") or module == "ray"):
            self.ctx.frameworks.add(framework)

    def visit_import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._note_module(alias.name)
            if alias.asname:
                self.ctx.aliases[alias.asname] = alias.name
            else:
                head = alias.name.split(".", 1)[0]
                self.ctx.aliases[head] = head

    def visit_import_from(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            for alias in node.names:  # relative imports shadow names without telling us what they are
                self.ctx.aliases.pop(alias.asname or alias.name, None)
            return
        self._note_module(node.module)
        for alias in node.names:
            if alias.name != "*":
                self.ctx.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    # -- scopes -------------------------------------------------------------------------------------------
    def _child_scope(self, kind: str, name: str, node: ast.AST) -> Scope:
        parent = self.ctx.scope
        qual = name if parent.kind == "module" else f"{parent.name}.{name}"
        if kind == "lambda":
            qual = f"{parent.name}.<lambda>" if parent.kind != "module" else "<lambda>"
        # Autograd state is inherited lexically: a function defined under no_grad (or inside a no_grad function).
        return Scope(kind, qual, node, parent, grad_disabled=1 if parent.no_grad else 0)

    def visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        ctx = self.ctx
        parent = ctx.scope
        ctx.defined.add(node.name)
        self.visit_all(node.decorator_list)
        self.visit_arguments(node.args)
        self.visit_all([node.returns])
        scope = self._child_scope("async" if isinstance(node, ast.AsyncFunctionDef) else "def", node.name, node)
        for dec in node.decorator_list:
            qual = ctx.resolve_expr(dec)
            if qual in K.GRAD_DISABLERS:
                scope.grad_disabled = 1
            elif qual in K.RAY_SERVE_DECORATORS:
                scope.handler = "ray-serve"
            elif scope.handler is None:
                scope.handler = self._route_decorator(dec)
        if scope.handler is None and parent.kind == "class" and parent.deployment and (
                not node.name.startswith("_") or node.name == "__call__"):
            scope.handler = "ray-serve"
        ctx.scope = scope
        self.visit_body(node.body)
        self.end_scope(scope)
        ctx.scope = parent

    def visit_arguments(self, args: ast.arguments) -> None:
        self.visit_all(args.defaults)
        self.visit_all(args.kw_defaults)

    def _route_decorator(self, dec: ast.expr) -> str | None:
        """Framework name when ``dec`` is a route decorator such as ``@app.post("/predict")``."""
        if not isinstance(dec, ast.Call) or not isinstance(dec.func, ast.Attribute):
            return None
        if dec.func.attr not in K.ROUTE_DECORATORS:
            return None
        base = dotted(dec.func.value)
        ctor = self.ctx.app_vars.get(base or "")
        if ctor is not None:
            return ctor.split(".", 1)[0]
        if not self.ctx.frameworks:
            return None
        path: ast.AST | None = dec.args[0] if dec.args else None
        if path is None:
            for kw in dec.keywords:
                if kw.arg in ("path", "rule", "uri"):
                    path = kw.value
        if isinstance(path, ast.Constant) and isinstance(path.value, str) and (
                path.value.startswith("/") or path.value == ""):
            return sorted(self.ctx.frameworks)[0]
        return None

    def visit_lambda(self, node: ast.Lambda) -> None:
        self.visit_arguments(node.args)
        parent = self.ctx.scope
        scope = self._child_scope("lambda", "<lambda>", node)
        self.ctx.scope = scope
        self.visit(node.body)
        self.end_scope(scope)
        self.ctx.scope = parent

    def visit_class(self, node: ast.ClassDef) -> None:
        ctx = self.ctx
        parent = ctx.scope
        ctx.defined.add(node.name)
        self.visit_all(node.decorator_list)
        self.visit_all(node.bases)
        self.visit_all(kw.value for kw in node.keywords)
        for base in node.bases:
            key = dotted(base) or ""
            if key in K.MODULE_BASES or key.endswith(".Module") or ctx.resolve(key) == "torch.nn.Module":
                ctx.model_classes.add(node.name)
        scope = self._child_scope("class", node.name, node)
        scope.grad_disabled = 0
        scope.deployment = any(ctx.resolve_expr(d) in K.RAY_SERVE_DECORATORS for d in node.decorator_list)
        ctx.scope = scope
        self.visit_body(node.body)
        ctx.scope = parent

    def end_scope(self, scope: Scope) -> None:
        for hook in self.rules.on_scope_end:
            hook(scope, self.ctx)

    # -- loops --------------------------------------------------------------------------------------------
    def _push_loop(self, node: ast.AST, target: ast.AST | None, iterable: ast.AST | None) -> LoopFrame:
        ctx = self.ctx
        targets = names_in(target) if target is not None else set()
        iter_key = None
        unpacked = isinstance(target, (ast.Tuple, ast.List))
        if iterable is not None:
            inner = iterable
            while isinstance(inner, ast.Call) and inner.args and (dotted(inner.func) or "").rsplit(".", 1)[-1] in (
                    "enumerate", "tqdm", "iter", "zip", "trange", "track"):
                if (dotted(inner.func) or "").rsplit(".", 1)[-1] in ("enumerate", "zip"):
                    unpacked = False
                inner = inner.args[0]
            iter_key = root_key(inner)
            if iter_key is not None and (iter_key in ctx.pinned_loaders or iter_key in ctx.scope.pinned):
                ctx.scope.pinned.update(targets)
            else:
                ctx.scope.pinned.difference_update(targets)
        frame = LoopFrame(node, targets, iter_key, unpacked=unpacked)
        for outer in ctx.scope.loops:
            outer.assigned.update(targets)
        ctx.scope.loops.append(frame)
        return frame

    def _pop_loop(self, frame: LoopFrame) -> None:
        ctx = self.ctx
        ctx.scope.loops.pop()
        for hook in self.rules.on_loop_end:
            hook(frame, ctx)

    def visit_for(self, node: ast.For | ast.AsyncFor) -> None:
        if isinstance(node, ast.AsyncFor):
            self._awaited = node.iter  # `async for x in engine.generate(...)` does not block
        self.visit(node.iter)
        frame = self._push_loop(node, node.target, node.iter)
        self.visit_body(node.body)
        self._pop_loop(frame)
        self.visit_body(node.orelse)

    def visit_while(self, node: ast.While) -> None:
        frame = self._push_loop(node, None, None)
        self.visit(node.test)
        self.visit_body(node.body)
        self._pop_loop(frame)
        self.visit_body(node.orelse)

    def visit_comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        frames = []
        for gen in node.generators:
            self.visit(gen.iter)
            frames.append(self._push_loop(node, gen.target, gen.iter))
            self.visit_all(gen.ifs)
        if isinstance(node, ast.DictComp):
            self.visit(node.key)
            self.visit(node.value)
        else:
            self.visit(node.elt)
        for frame in reversed(frames):
            self._pop_loop(frame)

    # -- blocks -------------------------------------------------------------------------------------------
    def visit_with(self, node: ast.With | ast.AsyncWith) -> None:
        ctx = self.ctx
        disabling = 0
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                for frame in ctx.scope.loops:
                    frame.assigned.update(names_in(item.optional_vars))
            expr = item.context_expr
            qual = ctx.resolve_expr(expr)
            if qual in K.GRAD_DISABLERS or (
                    qual in ("torch.set_grad_enabled", "torch.autograd.set_grad_enabled")
                    and isinstance(expr, ast.Call) and expr.args
                    and isinstance(expr.args[0], ast.Constant) and expr.args[0].value is False):
                disabling += 1
        ctx.scope.grad_disabled += disabling
        self.visit_body(node.body)
        ctx.scope.grad_disabled -= disabling

    def visit_if(self, node: ast.If) -> None:
        ctx = self.ctx
        self.visit(node.test)
        test = node.test
        guard = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) or (
            isinstance(test, ast.Compare) and any(isinstance(op, _GUARD_OPS) for op in test.ops)) or (
            isinstance(test, ast.Call) and dotted(test.func) in ("hasattr", "getattr"))
        modulo = any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(test))
        scope = ctx.scope
        scope.guards += guard
        scope.modulo_guards += modulo
        self.visit_body(node.body)
        scope.guards -= guard
        scope.modulo_guards -= modulo
        self.visit_body(node.orelse)

    # -- assignments and data flow ------------------------------------------------------------------------
    def visit_assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        node_hooks = self.rules.on_node.get(node.__class__)
        if node_hooks:  # (generic_visit fires these for the other node types)
            for hook in node_hooks:
                hook(node, self.ctx)
        value = node.value
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if value is not None:
            self._assign = (value, [k for k in map(dotted, targets) if k])
            self.visit(value)
            self._assign = None
        for target in targets:
            if not isinstance(target, (ast.Name, ast.Attribute)):
                self.visit(target)
        if value is None:
            return
        ctx = self.ctx
        scope = ctx.scope
        keys = [dotted(t) for t in targets]
        kind = self._value_kind(value)
        used = names_in(value) if isinstance(value, (ast.BinOp, ast.Call, ast.Name, ast.Subscript)) else set()
        for key in keys:
            if key is None:
                continue
            for frame in scope.loops:
                frame.assigned.add(key)
            if kind == "model":
                ctx.model_vars.add(key)
                if _chain_has(value, ("eval", "train")):
                    ctx.eval_keys.add(key)
                    scope.eval_keys.add(key)
            elif kind == "pipeline":
                ctx.model_vars.add(key)
                ctx.pipeline_vars.add(key)
            elif kind == "app" and isinstance(value, ast.Call):
                ctor = ctx.resolve_expr(value.func)
                if ctor is not None:
                    ctx.app_vars[key] = ctor
            elif kind == "pinned_loader":
                ctx.pinned_loaders.add(key)
            if kind == "pinned":
                scope.pinned.add(key)
            else:
                scope.pinned.discard(key)
            if kind in ("model_output", "loss"):
                scope.values[key] = kind
            else:
                scope.values.pop(key, None)
            if used:
                scope.deps[key] = used
            if kind == "cuda":
                ctx.cuda_names.add(key)

    def _value_kind(self, value: ast.expr) -> str | None:
        """What an assigned value is, for the data-flow sets."""
        ctx = self.ctx
        if isinstance(value, ast.Constant):
            return "cuda" if isinstance(value.value, str) and "cuda" in value.value else None
        if isinstance(value, ast.IfExp):
            return "cuda" if mentions_cuda(value) else None
        if isinstance(value, ast.BinOp):
            return "loss" if self._carries_loss(value) else None
        if isinstance(value, ast.Attribute):
            base = dotted(value.value)
            if base and ctx.scope.values.get(base) and value.attr in ("loss", "logits", "last_hidden_state"):
                return "loss" if value.attr == "loss" else "model_output"
            return None
        if not isinstance(value, ast.Call):
            return None
        func = value.func
        qual = ctx.resolve_expr(func)
        name = func.attr if isinstance(func, ast.Attribute) else (func.id if isinstance(func, ast.Name) else "")
        if qual == "torch.device":
            return "cuda" if any(mentions_cuda(a) for a in value.args) else None
        if qual in K.PIPELINE_PRODUCERS:
            return "pipeline"
        if qual in K.APP_CONSTRUCTORS:
            return "app"
        if qual in K.DATALOADERS:
            for kw in value.keywords:
                if kw.arg == "pin_memory" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                    return "pinned_loader"
            return None
        if name == "pin_memory":
            return "pinned"
        if qual in K.MODEL_PRODUCERS or name in ("from_pretrained", "from_single_file") or (
                qual is not None and qual.startswith(K.MODEL_LOADER_PREFIXES)) or (
                isinstance(func, ast.Name) and func.id in ctx.model_classes):
            return "model"
        if name in ("to", "cuda", "eval", "half", "float", "bfloat16", "train", "requires_grad_"):
            receiver = func.value if isinstance(func, ast.Attribute) else None
            root = root_key(receiver)
            if root is not None and (root in ctx.model_vars or is_model_name(root)):
                return "model"
            if name in ("to", "cuda"):
                return ctx.scope.values.get(root or "")
            return None
        if isinstance(func, ast.Attribute) and func.attr in K.DETACHERS:
            return None
        if (isinstance(func, (ast.Name, ast.Attribute)) and ctx.is_model_callee(func)) or (
                isinstance(func, ast.Attribute) and func.attr == "forward"
                                       and ctx.is_model_expr(func.value)):
            return "model_output"
        if name and K.LOSS_FUNCTION_RE.search(name):
            return "loss"
        return None

    def _carries_loss(self, node: ast.AST) -> bool:
        values = self.ctx.scope.values
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and values.get(sub.id) == "loss":
                return True
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in K.DETACHERS:
                return False
        return False

    def visit_augassign(self, node: ast.AugAssign) -> None:
        self.generic_visit(node)
        key = dotted(node.target)
        if key is not None:
            for frame in self.ctx.scope.loops:
                frame.assigned.add(key)

    # -- calls --------------------------------------------------------------------------------------------
    def visit_expr(self, node: ast.Expr) -> None:
        self._discarded = node.value
        self.visit(node.value)

    def visit_await(self, node: ast.Await) -> None:
        self._awaited = node.value
        self.visit(node.value)

    def visit_call(self, node: ast.Call) -> None:
        ctx = self.ctx
        awaited = self._awaited is node
        self._awaited = None
        call = CallInfo(node, ctx, awaited)
        scope = ctx.scope
        name = call.name
        func = node.func
        # Semantic classification shared by rules.
        if name in K.TRAINING_METHODS or (name == "step" and "optim" in (call.receiver_key or "").lower()):
            scope.trains = True
            ctx.trains = True
            ctx.mark_hot()
            if name == "backward" and call.receiver is not None:
                scope.backward_names.update(names_in(call.receiver))
        elif name in ("eval", "train") and call.receiver_key:
            scope.eval_keys.add(call.receiver_key)
            ctx.eval_keys.add(call.receiver_key)
        if ctx.uses_cuda is None and (
                name == "cuda" or (name == "to" and node.args and ctx.is_cuda_expr(node.args[0])) or (
                name == "to" and any(kw.arg == "device" and ctx.is_cuda_expr(kw.value) for kw in node.keywords))):
            ctx.uses_cuda = node.lineno
        if name == "is_available" and call.key and call.key.endswith("cuda.is_available") and ctx.uses_cuda is None:
            ctx.uses_cuda = node.lineno
        if (node.args or node.keywords) and ((isinstance(func, (ast.Name, ast.Attribute)) and ctx.is_model_callee(
                func)) or (name == "forward" and ctx.is_model_expr(call.receiver))):
            call.model_call = True
            ctx.mark_hot()
            model_key = dotted(func) if name != "forward" else call.receiver_key
            if model_key:
                ctx.called_models.add(model_key)
        elif name in ("generate", "predict") and ctx.is_model_expr(call.receiver):
            ctx.called_models.add(call.receiver_key or "")
        if self._assign is not None and self._assign[0] is node:
            call.assigned_to = self._assign[1]
        call.discarded = self._discarded is node
        if self._receiver_of is not None and self._receiver_of[0] is node:
            call.outer_method = self._receiver_of[1]
        if self.rules.on_model_load:
            call.load_kind = model_load_kind(call, ctx)
        if name is not None and name in K.REGISTER_METHODS or (
                name is not None and name in ("get", "post", "put", "delete", "patch", "route", "view", "Route",
                                              "WebSocketRoute", "APIRoute")
                and call.qualname in K.ROUTE_FACTORIES):
            self._register_handlers(node)
        # Dispatch.
        ctx.current_call = call
        if name is not None:
            hooks = self.rules.by_call_name.get(name)
            if hooks:
                for hook in hooks:
                    hook(call, ctx)
        if call.model_call:
            for hook in self.rules.on_model_call:
                hook(call, ctx)
        if call.load_kind is not None:
            for hook in self.rules.on_model_load:
                hook(call, ctx)
        # Children: the callee's receiver chain, then arguments (offloaded or spawned where they are).
        if isinstance(func, ast.Attribute):
            if isinstance(func.value, ast.Call):
                self._receiver_of = (func.value, func.attr)
            self.visit(func.value)
        elif not isinstance(func, ast.Name):
            self.visit(func)
        offload = (name in K.OFFLOAD_METHODS and isinstance(func, ast.Attribute)) or (
            call.qualname in K.OFFLOADERS)
        spawner = name in K.TASK_SPAWNERS
        if offload:
            scope.offload += 1
        for arg in node.args:
            if spawner and isinstance(arg, ast.Call):
                self._awaited = arg
            self.visit(arg)
        for kw in node.keywords:
            if spawner and isinstance(kw.value, ast.Call):
                self._awaited = kw.value
            self.visit(kw.value)
        if offload:
            scope.offload -= 1

    def _register_handlers(self, node: ast.Call) -> None:
        for arg in node.args:
            if isinstance(arg, ast.Name):
                self.ctx.registered.add(arg.id)
            elif isinstance(arg, ast.Attribute):
                self.ctx.registered.add(arg.attr)
        for kw in node.keywords:
            if kw.arg in K.HANDLER_KEYWORDS:
                key = dotted(kw.value)
                if key:
                    self.ctx.registered.add(key.rsplit(".", 1)[-1])


def _noop(node: ast.AST) -> None:
    return None


def _chain_has(node: ast.AST, names: tuple[str, ...]) -> bool:
    """A method chain (``Net().to(d).eval()``) includes a call to one of ``names``."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in names:
            return True
        node = node.func.value
    return False


def model_load_kind(call: CallInfo, ctx: FileContext) -> str | None:
    """What kind of model load or build a call is (``torch.load``, ``from_pretrained``, ``build Net``), or None."""
    name = call.name
    if name is None:
        return None
    if name in K.MODEL_LOADER_METHODS and isinstance(call.node.func, ast.Attribute):
        return name
    if isinstance(call.node.func, ast.Name) and name in ctx.model_classes:
        return f"build {name}"
    if isinstance(call.node.func, ast.Name) and name in K.MODEL_LOADER_FUNCTIONS:
        return name
    qual = call.qualname
    if qual is None:
        return None
    if qual in K.MODEL_LOADERS:
        return qual
    if qual in K.MODEL_PRODUCERS:
        return f"build {qual}"
    if qual.startswith(K.MODEL_LOADER_PREFIXES) and "Weights" not in qual and name[:1].islower():
        pretrained = any(kw.arg in ("weights", "pretrained") and not (
            isinstance(kw.value, ast.Constant) and kw.value.value in (None, False)) for kw in call.node.keywords)
        return qual if pretrained else f"build {qual}"
    return None
