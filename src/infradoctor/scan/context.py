"""What a rule sees while the visitor walks a file: the place, the call being visited, where hits go.

The place is the scope stack, loops, grad mode and request handlers; the call comes with what it means (a model
forward, model work, a load, the function of this file it runs).

The visitor (:mod:`infradoctor.scan.visitor`) keeps a :class:`FileContext` current; what a name holds comes from
:mod:`infradoctor.scan.values` over the file's declarations (:mod:`infradoctor.scan.index`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from infradoctor.findings import Severity
from infradoctor.scan import values as V
from infradoctor.scan.index import ClassInfo, FileIndex, FunctionInfo
from infradoctor.scan.syntax import dotted, is_model_name, mentions_cuda, names_in, root_key
from infradoctor.scan.values import ClassCategory, Values

if TYPE_CHECKING:
    from infradoctor.scan.dispatch import RuleSet

__all__ = [
    "CallInfo", "Edit", "FileContext", "Hit", "LoopFrame", "Scope", "dotted", "is_model_name", "mentions_cuda",
    "names_in", "root_key",
]


@dataclass
class Edit:
    """A text insertion at a position (1-based line, 0-based UTF-8 byte column)."""

    line: int
    """1-based line."""
    byte_col: int
    """0-based UTF-8 byte offset in the line."""
    text: str
    """Text to insert."""
    description: str
    """What the edit does, for the fix report."""
    safe: bool = True
    """Safe fixes keep behaviour; unsafe ones (``--unsafe-fixes``) may change it."""


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
    """A fix, when the rule has one."""
    requires: tuple[str, str] | None = None
    """Cross-file: (fact, dotted module) -- the hit counts only if a scanned file that is that module provides
    that fact (see ``FileContext.facts``); the rule's ``resolve_cross_file`` hook completes it."""
    severity: Severity | None = None
    """A severity other than the rule's default (a reviewed ``weights_only=False`` is lower)."""


@dataclass
class LoopFrame:
    """A ``for``/``while`` loop or comprehension being visited."""

    node: ast.AST
    """The loop node."""
    targets: set[str]
    """Names bound by the loop header (``for x, y in ...``)."""
    iter_key: str | None
    """Dotted name of the iterable's root (``loader`` for ``enumerate(loader)``), when simple."""
    assigned: set[str] = field(default_factory=set)
    """Names assigned inside the loop so far."""
    written: set[str] = field(default_factory=set)
    """Names whose content the loop changes in place (``tokens[:, pos] = t``, ``x += y``): a recurrence."""
    unpacked: bool = False
    """The header unpacks each item (``for x, y in data``) without enumerate/zip: items are tuples (batches)."""
    iterable: ast.AST | None = None
    """What the loop walks, with ``enumerate``/``zip``/``tqdm`` wrappers taken off; None for ``while``."""
    hot: bool = False
    """The loop, or a loop inside it, runs model calls or training steps."""
    direct_hot: bool = False
    """The loop's own body (not only a loop inside it) runs model calls or training steps: once per iteration."""
    trains: bool = False
    """The loop's body runs a training step (``backward``, an optimizer step, ``fit``)."""
    pending: list[Hit] = field(default_factory=list)
    """Hits that count only if the loop turns out hot."""
    data: dict[str, Any] = field(default_factory=dict)
    """Rule-private state for this loop, keyed by rule code (never by ``id()`` of a frame: ids are reused)."""


@dataclass
class Summary:
    """What a function of the file does when called, for rules looking at its callers (one level deep)."""

    loads: list[tuple[int, str]] = field(default_factory=list)
    """(line, what) of model loads it makes outside a lazy-initialisation guard."""
    work: list[tuple[int, str]] = field(default_factory=list)
    """(line, what) of model calls it makes in its own thread."""


@dataclass
class Scope:
    """A module, class, function or lambda being visited."""

    kind: str
    """``module``, ``class``, ``def``, ``async`` or ``lambda``."""
    name: str
    """Qualified name (``Predictor.__call__``)."""
    node: ast.AST | None
    """The defining node."""
    parent: Scope | None
    """The enclosing scope."""
    grad_disabled: int = 0
    """> 0 while autograd is off here (decorator, enclosing with-block or enclosing function)."""
    handler: str | None = None
    """Framework name when a decorator or class makes this a request handler."""
    deployment: bool = False
    """Class scope: a Ray Serve deployment."""
    info: FunctionInfo | None = None
    """The function's index entry."""
    cls: ClassInfo | None = None
    """The class (for a class scope) or the class a method belongs to."""
    category: ClassCategory | None = None
    """What that class is (module, pydantic, handler class)."""
    loops: list[LoopFrame] = field(default_factory=list)
    """Open loops in this function (a nested function starts with none)."""
    guards: int = 0
    """> 0 inside ``if x is None:``-style guards (lazy initialisation)."""
    once_guards: int = 0
    """> 0 inside ``if step % N == 0:`` (periodic) or ``if i == 0:`` (once) guards of a loop."""
    offload: int = 0
    """> 0 inside the arguments of a call that runs its callable in a thread."""
    exit_tests: int = 0
    """> 0 inside a loop's exit condition (a ``while`` test, the test of an ``if`` that breaks or returns)."""
    trains: bool = False
    """The function calls ``.backward()``, ``zero_grad()``, an optimizer step or a trainer's ``fit``."""
    train_mode: bool = False
    """The function calls ``model.train()``: training mode is chosen on purpose."""
    exports: bool = False
    """The function exports a model (``torch.onnx.export``, ``torch.jit.trace``): forwards are for shapes."""
    test: bool = False
    """A test function (``test_*``) or pytest fixture."""
    startup: bool = False
    """Start-up or shutdown code (a lifespan, ``@app.on_event("startup")``, ``on_startup=[...]``): it runs before
    the server takes requests or after it stops, not per request."""
    kinds: dict[str, str | None] = field(default_factory=dict)
    """Name -> kind (:mod:`infradoctor.scan.values`) of what was assigned to it so far."""
    deps: dict[str, set[str]] = field(default_factory=dict)
    """Name -> names its assigned value was computed from (one level)."""
    backward_names: set[str] = field(default_factory=set)
    """Names in the receivers of ``.backward()`` calls."""
    eval_keys: set[str] = field(default_factory=set)
    """Receivers of ``.eval()`` in this scope."""
    summary: Summary = field(default_factory=Summary)
    """What the function does, for its callers."""
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

    @property
    def in_module_class(self) -> bool:
        """A method of an ``nn.Module`` subclass (the model's own code: grad mode belongs to its caller)."""
        return self.category is not None and self.category.module

    def function_scope(self) -> Scope | None:
        """The innermost function scope enclosing this one (itself when it is one)."""
        scope: Scope | None = self
        while scope is not None and not scope.is_function:
            scope = scope.parent
        return scope


class CallInfo:
    """A call site, with what rules ask about it computed once."""

    __slots__ = ("node", "name", "key", "receiver", "receiver_key", "awaited", "load_kind", "assigned_to",
                 "outer_method", "discarded", "model", "forward", "work", "held_key", "callee_fn", "resolved",
                 "_ctx", "_qual")

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
        self.load_kind: str | None = None
        """What model load or build the call is (``torch.load``, ``build Net``), or None."""
        self.assigned_to: list[str] = []
        """Names the call's result is assigned to."""
        self.discarded = False
        """The call is a statement of its own: its result is thrown away (``model(x)`` as a warm-up)."""
        self.outer_method: str | None = None
        """Method called on this call's result (``parameters`` for ``m.cpu().parameters()``)."""
        self.model: str | None = None
        """Kind of the model object the call runs (``model``, ``pipeline``, ``foreign``, ``named``), or None."""
        self.forward = False
        """A torch forward: the model object called (or ``.forward``, ``get_text_features``...)."""
        self.work = False
        """The call runs a model (a forward, ``generate``, a pipeline or another framework's model)."""
        self.resolved = False
        """The model was resolved from its assignment, not taken from its name alone."""
        self.held_key: str | None = None
        """Dotted name of the model object the call runs."""
        self.callee_fn: FunctionInfo | None = None
        """The function or method of this file that is called."""
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


class ScopeEnv:
    """Names as seen from the place being visited: assignments so far, then the function's others, then globals."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    @property
    def cls(self) -> ClassInfo | None:
        """The class of the innermost method."""
        scope: Scope | None = self.ctx.scope
        while scope is not None:
            if scope.cls is not None and scope.kind != "class":
                return scope.cls
            if scope.kind == "class":
                return None
            scope = scope.parent
        return None

    def local(self, name: str) -> tuple[bool, str | None]:
        """(found, kind) of a name bound in the enclosing functions (or the module code so far)."""
        scope: Scope | None = self.ctx.scope
        values = self.ctx.values
        while scope is not None:
            if scope.kind == "class":
                scope = scope.parent
                continue
            if scope.kind == "module":  # globals: module code sees its own order, functions see every binding
                if scope is self.ctx.scope and name in scope.kinds:
                    return True, scope.kinds[name]
                return False, None
            if name in scope.kinds:
                return True, scope.kinds[name]
            info = scope.info
            if info is not None:
                if name in info.globals:
                    return False, None
                found, kind = values.local_kind(info, name)
                if found:
                    return True, kind
            scope = scope.parent
        return False, None


class FileContext:
    """What rules can ask about the file and the place being visited; where they report."""

    def __init__(self, path: str, rules: RuleSet, index: FileIndex | None = None, *, test: bool = False) -> None:
        self.path = path
        self.rules = rules
        self.index = index or FileIndex()
        self.values = Values(self.index)
        self.env = ScopeEnv(self)
        self.aliases: dict[str, str] = self.index.aliases
        """Local name -> qualified name, from imports."""
        self.facts: dict[str, Any] = {}
        """What this file tells rules looking from other files (``C013.gpu_model_line``): see ``Hit.requires``."""
        self.defined: set[str] = self.index.defined
        """Names defined by def/class at any level (shadowing builtins like ``open``)."""
        self.uses_torch = False
        """The file imports torch or a library built on it."""
        self.frameworks: set[str] = set()
        """Web frameworks the file imports."""
        self.app_vars: dict[str, str] = {}
        """Variable -> constructor for apps and routers (``app = FastAPI()``)."""
        self.uses_cuda: int | None = None
        """Line of the first sign of CUDA use (``.cuda()``, ``"cuda"`` device, ``torch.cuda.*``), or None."""
        self.registered: set[str] = set()
        """Plain function names registered as handlers through a call (``app.add_route("/", handler)``)."""
        self.registered_methods: set[str] = set()
        """Method names registered as handlers (``app.add_route("/", self.handle)``)."""
        self.eval_keys: set[str] = set()
        """Receivers of ``.eval()``/``.train(...)`` anywhere in the file (and targets of ``x = m.eval()``)."""
        self.called_models: set[str] = set()
        """Dotted names of models called anywhere in the file."""
        self.trains = False
        """Some code in the file trains: ``.backward()``, an optimizer step, a trainer's ``fit``, a
        LightningModule with ``training_step``."""
        self.exports = False
        """The file exports models (``torch.onnx.export``, ``torch.jit.trace``...)."""
        self.is_test = test
        """The file is test code (``test_*.py``, ``conftest.py``): only the rules that run on tests see it."""
        self.in_test_folder = False
        """The file is under a folder of test code (``tests/``): helpers and fixtures, servers for end-to-end
        tests."""
        self.summaries: dict[int, Summary] = {}
        """Function summaries by ``id()`` of the definition node (the tree outlives the pass)."""
        self.hits: list[Hit] = []
        self.pending_handler: list[tuple[Scope, Hit]] = []
        self.scope: Scope = Scope("module", "<module>", None, None)
        self.data: dict[str, Any] = {}
        """Rule-private file-wide state, keyed by rule code."""
        self.current_call: CallInfo | None = None
        self.sinks: list[str] = []
        """Where the value being visited goes, innermost last: a call's name for its arguments, ``assign``,
        ``return`` (also ``yield``), ``container`` (a list, tuple, set or dict literal)."""
        self.uses_device: int | None = None
        """Line of the first sign of device placement (``.to(device)``, ``.cuda()``, ``device=``, an accelerator
        object): code that may run on a GPU, where a host sync costs something."""

    @property
    def sink(self) -> str | None:
        """Where the value being visited goes (see :attr:`sinks`), or None for a statement of its own."""
        return self.sinks[-1] if self.sinks else None

    # -- name resolution --------------------------------------------------------------------------------
    def resolve(self, key: str | None) -> str | None:
        """Qualified name of a dotted name through import aliases; builtins as ``builtins.X``; else None."""
        if not key:
            return None
        head, _, rest = key.partition(".")
        target = self.aliases.get(head)
        if target is None or head in self.index.shadowed:
            if not rest and head in ("open", "input", "print", "next") and head not in self.defined:
                return f"builtins.{head}"
            return self.index.star_resolve(key) if self.index.star_modules else None
        return f"{target}.{rest}" if rest else target

    def resolve_expr(self, node: ast.AST | None) -> str | None:
        """Qualified name of a Name/Attribute expression, or of a called decorator (``@torch.no_grad()``)."""
        if isinstance(node, ast.Call):
            node = node.func
        return self.resolve(dotted(node))

    def kind_of(self, node: ast.expr | None) -> str | None:
        """What an expression holds here (:mod:`infradoctor.scan.values`)."""
        if node is None:
            return None
        return self.values.infer(node, self.env)

    def key_kind(self, key: str | None) -> str | None:
        """What a dotted name holds here."""
        return self.values.key_kind(key, self.env) if key else None

    def is_model_expr(self, node: ast.AST | None) -> bool:
        """The expression holds a model: resolved from its assignment, or (when unknown) named like one."""
        key = dotted(node)
        if key is None:
            return False
        kind = self.key_kind(key)
        if kind is not None:
            return kind in V.MODEL_KINDS or kind == V.NAMED
        return is_model_name(key)

    def is_cuda_expr(self, node: ast.AST | None) -> bool:
        """A device expression that means CUDA: ``"cuda:0"``, ``torch.device("cuda")``, a name assigned one."""
        if node is None:
            return False
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and "cuda" in node.value
        return self.kind_of(node) == V.CUDA  # type: ignore[arg-type]

    def note_cuda(self, line: int) -> None:
        """The file shows CUDA use at ``line``."""
        if self.uses_cuda is None:
            self.uses_cuda = line

    # -- places -------------------------------------------------------------------------------------------
    @property
    def function(self) -> Scope:
        """The innermost scope."""
        return self.scope

    @property
    def loops(self) -> list[LoopFrame]:
        """Open loops of the current function."""
        return self.scope.loops

    def mark_hot(self, trains: bool = False) -> None:
        """The open loops of the current function run model work (the innermost one in its own body)."""
        loops = self.scope.loops
        for frame in loops:
            frame.hot = True
            frame.trains |= trains
        if loops:
            loops[-1].direct_hot = True

    # -- reporting ----------------------------------------------------------------------------------------
    def make_hit(self, code: str, node: ast.AST, message: str, evidence: dict[str, Any] | None = None,
                 edit: Edit | None = None, severity: Severity | None = None) -> Hit:
        """A hit at a node, in the current function."""
        fn = self.scope.function_scope()
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
            severity=severity,
        )

    def report(self, code: str, node: ast.AST, message: str, evidence: dict[str, Any] | None = None,
               edit: Edit | None = None, severity: Severity | None = None) -> None:
        """Report a hit now."""
        self.hits.append(self.make_hit(code, node, message, evidence, edit, severity))

    def report_if_handler(self, scope: Scope, hit: Hit) -> None:
        """Report ``hit`` at the end of the file if ``scope`` is a request handler by then."""
        if scope.handler is not None:
            hit.evidence.setdefault("handler", scope.handler)
            self.hits.append(hit)
        elif scope.kind in ("def", "async"):
            self.pending_handler.append((scope, hit))

    def is_registered(self, scope: Scope) -> bool:
        """The function was registered as a route by a call (``app.add_route("/p", handler)``)."""
        short = scope.name.rsplit(".", 1)[-1]
        if scope.cls is not None:  # a method: only an attribute registration (``self.handle``) names it
            return short in self.registered_methods
        return short in self.registered

    def resolve_pending(self) -> None:
        """At the end of the file: keep pending hits whose function was registered as a route."""
        for scope, hit in self.pending_handler:
            if self.is_registered(scope):
                hit.evidence.setdefault("handler", "registered route")
                self.hits.append(hit)
        self.pending_handler.clear()

    def summary_of(self, fn: FunctionInfo | None) -> Summary | None:
        """What a function of the file does (known once the visitor has passed its end)."""
        return self.summaries.get(id(fn.node)) if fn is not None else None
