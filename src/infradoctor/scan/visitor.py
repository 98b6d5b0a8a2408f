"""The one pass over a file's syntax tree that every scan rule shares.

:class:`FileVisitor` walks the tree once. On the way it keeps the :class:`~infradoctor.scan.context.FileContext`
current: the scope stack (module, class, def, async def, lambda), loops and whether they run model work, whether
autograd is off (``with torch.no_grad():``, ``@torch.inference_mode()``, a project's own decorator that returns one,
Lightning's validation hooks), whether a call runs in a worker thread, which functions are request handlers (route
decorators, Ray Serve deployments, serving framework classes such as TorchServe handlers, functions registered with
``add_route`` and friends), and per-function data flow (what each name holds: :mod:`infradoctor.scan.values`).
Calls are classified once by :mod:`infradoctor.scan.calls` (a model forward, model work, a load, the function of
this file that is called), functions and blocks get their roles from :mod:`infradoctor.scan.roles`, and events go
to the rules through :mod:`infradoctor.scan.dispatch`. The visitor itself only walks and keeps the place.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from typing import Any

from infradoctor.scan import knowledge as K
from infradoctor.scan import values as V
from infradoctor.scan.calls import assigned_kind, classify, classify_model_call, model_load_kind
from infradoctor.scan.context import CallInfo, FileContext, Hit, LoopFrame, Scope
from infradoctor.scan.index import index_file
from infradoctor.scan.roles import disables_grad, lazy_guard, once_test, route_decorator
from infradoctor.scan.syntax import chain_has, dotted, names_in, root_key

# Re-exported for rule modules written against the visitor.
__all__ = ["CallInfo", "FileContext", "FileVisitor", "Hit", "LoopFrame", "Scope", "classify_model_call",
           "model_load_kind", "visit_file"]

_AST = ast.AST
_NO_GRAD_SETTERS = ("torch.set_grad_enabled", "torch.autograd.set_grad_enabled")


class FileVisitor:
    """Walks one module once, keeping :class:`FileContext` current and dispatching events to rules."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.rules = ctx.rules
        self._awaited: ast.AST | None = None
        self._iterated: ast.AST | None = None
        self._assign: tuple[ast.AST, list[str]] | None = None
        self._assigned_call: CallInfo | None = None
        self._receiver_of: tuple[ast.AST, str] | None = None
        self._discarded: ast.AST | None = None
        self._disabler_cache: dict[str, bool] = {}
        self._dispatch: dict[type, Callable[[Any], None]] = {
            ast.Import: self.visit_import, ast.ImportFrom: self.visit_import,
            ast.FunctionDef: self.visit_function, ast.AsyncFunctionDef: self.visit_function,
            ast.Lambda: self.visit_lambda, ast.ClassDef: self.visit_class,
            ast.For: self.visit_for, ast.AsyncFor: self.visit_for, ast.While: self.visit_while,
            ast.ListComp: self.visit_comprehension, ast.SetComp: self.visit_comprehension,
            ast.GeneratorExp: self.visit_comprehension, ast.DictComp: self.visit_comprehension,
            ast.With: self.visit_with, ast.AsyncWith: self.visit_with, ast.If: self.visit_if,
            ast.Assign: self.visit_assign, ast.AnnAssign: self.visit_assign, ast.AugAssign: self.visit_augassign,
            ast.Await: self.visit_await, ast.Call: self.visit_call, ast.Expr: self.visit_expr,
            ast.Return: self.visit_sink, ast.Yield: self.visit_sink, ast.YieldFrom: self.visit_sink,
            ast.List: self.visit_sink, ast.Tuple: self.visit_sink, ast.Set: self.visit_sink,
            ast.Dict: self.visit_sink, ast.BinOp: self.visit_compute, ast.Compare: self.visit_compute,
            ast.UnaryOp: self.visit_compute, ast.JoinedStr: self.visit_compute,
            ast.Name: _noop, ast.Constant: _noop, ast.Pass: _noop, ast.Global: _noop, ast.Nonlocal: _noop,
            ast.Load: _noop, ast.Store: _noop, ast.Del: _noop, ast.alias: _noop,
        }
        self._fields: dict[type, tuple[str, ...]] = {}

    # -- traversal ----------------------------------------------------------------------------------------
    def run(self, tree: ast.Module) -> list[Hit]:
        """Visit the module; fire end-of-file hooks; return the hits."""
        ctx = self.ctx
        ctx.scope = Scope("module", "<module>", tree, None)
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
        hooks = self.rules.on_node.get(cls)
        if hooks:
            for hook in hooks:
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

    def _node_hooks(self, node: ast.AST) -> None:
        hooks = self.rules.on_node.get(node.__class__)
        if hooks:
            for hook in hooks:
                hook(node, self.ctx)

    def visit_body(self, body: Iterable[ast.AST]) -> None:
        visit = self.visit
        for stmt in body:
            visit(stmt)

    def visit_all(self, nodes: Iterable[ast.AST | None]) -> None:
        for node in nodes:
            if node is not None:
                self.visit(node)

    # -- imports ------------------------------------------------------------------------------------------
    def visit_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.ImportFrom):
            if node.level or not node.module:
                return
            modules = [node.module]
        else:
            modules = [alias.name for alias in node.names]
        ctx = self.ctx
        for module in modules:
            root = module.split(".", 1)[0]
            if root in K.TORCH_ROOTS:
                ctx.uses_torch = True
            framework = K.WEB_FRAMEWORK_ROOTS.get(root)
            if framework is not None and (root != "ray" or module.startswith("ray.serve") or module == "ray"):
                ctx.frameworks.add(framework)

    # -- scopes -------------------------------------------------------------------------------------------
    def _child_scope(self, kind: str, name: str, node: ast.AST) -> Scope:
        parent = self.ctx.scope
        qual = name if parent.kind == "module" else f"{parent.name}.{name}"
        if kind == "lambda":
            qual = f"{parent.name}.<lambda>" if parent.kind != "module" else "<lambda>"
        # Autograd state is inherited lexically: a function defined under no_grad (or inside a no_grad function).
        scope = Scope(kind, qual, node, parent, grad_disabled=1 if parent.no_grad else 0)
        if parent.kind == "class":
            scope.cls, scope.category = parent.cls, parent.category
        elif parent.is_function:
            scope.cls, scope.category, scope.test = parent.cls, parent.category, parent.test
            scope.startup = parent.startup
        return scope

    def visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._node_hooks(node)
        ctx = self.ctx
        parent = ctx.scope
        self.visit_all(node.decorator_list)
        self.visit_arguments(node.args)
        self.visit_all([node.returns])
        scope = self._child_scope("async" if isinstance(node, ast.AsyncFunctionDef) else "def", node.name, node)
        scope.info = ctx.index.function_of(node)
        if node.name in ctx.index.startup:
            scope.startup = True
        for dec in node.decorator_list:
            qual = ctx.resolve_expr(dec)
            if disables_grad(dec, qual, ctx, self._disabler_cache):
                scope.grad_disabled = 1
            elif qual in K.RAY_SERVE_DECORATORS:
                scope.handler = "ray-serve"
            elif qual in K.REQUEST_METHOD_DECORATORS:
                scope.handler = qual.split(".", 1)[0]
            elif qual is not None and qual.startswith("pytest.fixture"):
                scope.test = True
            elif scope.handler is None:
                scope.handler = route_decorator(dec, ctx)
        if node.name.startswith("test") and (parent.kind == "module" or (
                parent.kind == "class" and parent.name.startswith("Test"))):
            scope.test = True
        category = scope.category if parent.kind == "class" else None
        if category is not None:
            if category.lightning and node.name in K.LIGHTNING_GRAD_FREE_HOOKS:
                scope.grad_disabled = 1  # the Trainer runs these with autograd off
            if scope.handler is None and node.name in category.handler_methods:
                scope.handler = category.handler
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

    def visit_lambda(self, node: ast.Lambda) -> None:
        self.visit_arguments(node.args)
        parent = self.ctx.scope
        scope = self._child_scope("lambda", "<lambda>", node)
        self.ctx.scope = scope
        self.visit(node.body)
        self.end_scope(scope)
        self.ctx.scope = parent

    def visit_class(self, node: ast.ClassDef) -> None:
        self._node_hooks(node)
        ctx = self.ctx
        parent = ctx.scope
        self.visit_all(node.decorator_list)
        self.visit_all(node.bases)
        self.visit_all(kw.value for kw in node.keywords)
        scope = self._child_scope("class", node.name, node)
        scope.grad_disabled = 0
        info = ctx.index.classes.get(node.name)
        if info is not None and info.node is node:
            scope.cls = info
            scope.category = ctx.values.category(node.name)
            if scope.category.trains:
                ctx.trains = True
        else:
            scope.cls, scope.category = None, None
        scope.deployment = any(ctx.resolve_expr(d) in K.RAY_SERVE_DECORATORS for d in node.decorator_list)
        ctx.scope = scope
        self.visit_body(node.body)
        ctx.scope = parent

    def end_scope(self, scope: Scope) -> None:
        if scope.is_function and isinstance(scope.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.ctx.summaries[id(scope.node)] = scope.summary
        for hook in self.rules.on_scope_end:
            hook(scope, self.ctx)

    # -- loops --------------------------------------------------------------------------------------------
    def _push_loop(self, node: ast.AST, target: ast.AST | None, iterable: ast.AST | None) -> LoopFrame:
        ctx = self.ctx
        scope = ctx.scope
        targets = names_in(target) if target is not None else set()
        iter_key = None
        unpacked = isinstance(target, (ast.Tuple, ast.List))
        pinned = False
        if iterable is not None:
            inner = iterable
            while isinstance(inner, ast.Call) and inner.args and (dotted(inner.func) or "").rsplit(".", 1)[-1] in (
                    "enumerate", "tqdm", "iter", "zip", "trange", "track"):
                if (dotted(inner.func) or "").rsplit(".", 1)[-1] in ("enumerate", "zip"):
                    unpacked = False
                inner = inner.args[0]
            iter_key = root_key(inner)
            if iter_key is not None:
                kind = scope.kinds.get(iter_key) if iter_key in scope.kinds else ctx.key_kind(iter_key)
                pinned = kind in (V.PINNED_LOADER, V.PINNED)
        inner_iterable = inner if iterable is not None else None
        used = names_in(inner_iterable) if inner_iterable is not None else set()
        for name in targets:
            scope.kinds[name] = V.PINNED if pinned else None
            if used:  # `for f in files:` keeps f derived from files (where a loaded path came from, C014)
                scope.deps[name] = scope.deps.get(name, set()) | used
        frame = LoopFrame(node, targets, iter_key, unpacked=unpacked, iterable=inner_iterable)
        for outer in scope.loops:
            outer.assigned.update(targets)
        scope.loops.append(frame)
        return frame

    def _pop_loop(self, frame: LoopFrame) -> None:
        ctx = self.ctx
        ctx.scope.loops.pop()
        for hook in self.rules.on_loop_end:
            hook(frame, ctx)

    def visit_for(self, node: ast.For | ast.AsyncFor) -> None:
        self._node_hooks(node)
        if isinstance(node, ast.AsyncFor):
            self._awaited = node.iter  # `async for x in engine.generate(...)` does not block
        else:
            self._iterated = node.iter
        self.ctx.sinks.append("iterate")
        self.visit(node.iter)
        self.ctx.sinks.pop()
        frame = self._push_loop(node, node.target, node.iter)
        self.visit_body(node.body)
        self._pop_loop(frame)
        self.visit_body(node.orelse)

    def visit_while(self, node: ast.While) -> None:
        self._node_hooks(node)
        frame = self._push_loop(node, None, None)
        scope = self.ctx.scope
        scope.exit_tests += 1  # the loop's own exit condition
        self.visit(node.test)
        scope.exit_tests -= 1
        self.visit_body(node.body)
        self._pop_loop(frame)
        self.visit_body(node.orelse)

    def visit_comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        frames = []
        for gen in node.generators:
            self._iterated = gen.iter
            self.ctx.sinks.append("iterate")
            self.visit(gen.iter)
            self.ctx.sinks.pop()
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
        self._node_hooks(node)
        ctx = self.ctx
        disabling = 0
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                for name in names_in(item.optional_vars):
                    ctx.scope.kinds[name] = None
                    for frame in ctx.scope.loops:
                        frame.assigned.add(name)
            expr = item.context_expr
            qual = ctx.resolve_expr(expr)
            if qual in K.GRAD_DISABLERS or (
                    qual in _NO_GRAD_SETTERS and isinstance(expr, ast.Call) and expr.args
                    and isinstance(expr.args[0], ast.Constant) and expr.args[0].value is False) or (
                    qual not in _NO_GRAD_SETTERS and disables_grad(expr, qual, ctx, self._disabler_cache)):
                disabling += 1
        ctx.scope.grad_disabled += disabling
        self.visit_body(node.body)
        ctx.scope.grad_disabled -= disabling

    def visit_if(self, node: ast.If) -> None:
        self._node_hooks(node)
        ctx = self.ctx
        scope = ctx.scope
        test = node.test
        if isinstance(test, ast.Constant):  # `if 1:` ... `else:`, `if False:`: only one branch ever runs
            self.visit_body(node.body if test.value else node.orelse)
            return
        exits = any(isinstance(s, (ast.Break, ast.Return)) for s in node.body)
        scope.exit_tests += exits
        self.visit(test)
        scope.exit_tests -= exits
        guard = lazy_guard(node, ctx)
        once = scope.loops and once_test(test, scope)
        scope.guards += guard
        scope.once_guards += bool(once)
        self.visit_body(node.body)
        scope.guards -= guard
        scope.once_guards -= bool(once)
        self.visit_body(node.orelse)

    # -- assignments and data flow ------------------------------------------------------------------------
    def visit_assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        self._node_hooks(node)
        value = node.value
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if value is not None:
            self._assign = (value, [k for k in map(dotted, targets) if k])
            self._assigned_call = None
            if all(isinstance(t, ast.Name) and t.id == "_" for t in targets):
                self._discarded = value  # `_ = model(x)`: a dry run, the result is thrown away
            self.ctx.sinks.append("assign")
            self.visit(value)
            self.ctx.sinks.pop()
            self._assign = None
        for target in targets:
            if not isinstance(target, (ast.Name, ast.Attribute)):
                self.visit(target)
            if isinstance(target, ast.Subscript):
                written = root_key(target)
                if written is not None:
                    for frame in self.ctx.scope.loops:
                        frame.written.add(written)
        if value is None:
            return
        ctx = self.ctx
        scope = ctx.scope
        kind = assigned_kind(value, self._assigned_call, ctx)
        used = names_in(value) if isinstance(value, (ast.BinOp, ast.Call, ast.Name, ast.Subscript,
                                                      ast.Attribute)) else set()
        for target in targets:
            if isinstance(target, (ast.Tuple, ast.List)):
                names = [k for k in (dotted(e.value if isinstance(e, ast.Starred) else e) for e in target.elts) if k]
                element = kind if kind in V.GRAPH_KINDS or kind == V.PINNED else None
                pairs = [(name, element) for name in names]
            else:
                key = dotted(target)
                pairs = [(key, kind)] if key is not None else []
            for key, key_kind in pairs:
                for frame in scope.loops:
                    frame.assigned.add(key)
                if key_kind == V.APP and isinstance(value, ast.Call):
                    ctor = ctx.resolve_expr(value.func)
                    if ctor is not None:
                        ctx.app_vars[key] = ctor
                if key_kind in V.MODEL_KINDS and chain_has(value, ("eval", "train")):
                    ctx.eval_keys.add(key)
                    scope.eval_keys.add(key)
                scope.kinds[key] = key_kind
                if used:  # every value the name held: `x = pad(x, ...)` keeps x derived from the loop item
                    scope.deps[key] = scope.deps.get(key, set()) | used

    def visit_augassign(self, node: ast.AugAssign) -> None:
        self.generic_visit(node)
        key = root_key(node.target)
        if key is not None:
            for frame in self.ctx.scope.loops:
                frame.assigned.add(key)
                frame.written.add(key)

    # -- calls --------------------------------------------------------------------------------------------
    def visit_expr(self, node: ast.Expr) -> None:
        self._discarded = node.value
        self.visit(node.value)

    def visit_await(self, node: ast.Await) -> None:
        self._awaited = node.value
        self.visit(node.value)

    def visit_call(self, node: ast.Call) -> None:
        ctx = self.ctx
        call = CallInfo(node, ctx, self._awaited is node)
        self._awaited = None
        if self._assign is not None and self._assign[0] is node:
            call.assigned_to = self._assign[1]
            self._assigned_call = call
        call.discarded = self._discarded is node
        if self._receiver_of is not None and self._receiver_of[0] is node:
            call.outer_method = self._receiver_of[1]
        iterated = self._iterated is node
        self._iterated = None
        classify(call, ctx)
        if iterated:
            ctx.data["iterated"] = call
        self._dispatch_call(call)
        if iterated:
            ctx.data.pop("iterated", None)
        self._visit_call_children(call)

    def _dispatch_call(self, call: CallInfo) -> None:
        ctx = self.ctx
        ctx.current_call = call
        name = call.name
        if name is not None:
            hooks = self.rules.by_call_name.get(name)
            if hooks:
                for hook in hooks:
                    hook(call, ctx)
        if call.work:
            for hook in self.rules.on_model_call:
                hook(call, ctx)
        if call.load_kind is not None:
            for hook in self.rules.on_model_load:
                hook(call, ctx)
        if call.callee_fn is not None:
            for hook in self.rules.on_local_call:
                hook(call, ctx)
        scope = ctx.scope
        if scope.kind == "async" and not call.awaited and not scope.offload:
            for hook in self.rules.on_async_call:
                hook(call, ctx)

    def _visit_call_children(self, call: CallInfo) -> None:
        """The callee's receiver chain, then the arguments (offloaded or spawned where they are)."""
        node = call.node
        func = node.func
        scope = self.ctx.scope
        name = call.name
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
        iterates = call.qualname == "builtins.next"
        sinks = self.ctx.sinks
        sinks.append(name or "")
        for arg in node.args:
            if spawner and isinstance(arg, ast.Call):
                self._awaited = arg
            elif iterates:
                self._iterated = arg
            self.visit(arg)
        for kw in node.keywords:
            if spawner and isinstance(kw.value, ast.Call):
                self._awaited = kw.value
            self.visit(kw.value)
        sinks.pop()
        if offload:
            scope.offload -= 1

    def visit_compute(self, node: ast.AST) -> None:
        """Arithmetic, comparisons and formatting: a value computed with here, not kept."""
        sinks = self.ctx.sinks
        sinks.append("")
        self.generic_visit(node)
        sinks.pop()

    def visit_sink(self, node: ast.AST) -> None:
        """A value that leaves the expression: returned, yielded, or put in a container literal."""
        sinks = self.ctx.sinks
        sinks.append("return" if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)) else "container")
        self.generic_visit(node)
        sinks.pop()

def _noop(node: ast.AST) -> None:
    return None


def visit_file(tree: ast.Module, path: str, rules: Any, *, test: bool = False, test_folder: bool = False
               ) -> FileContext:
    """Index and visit one parsed module with the given rules; the context holds the hits and the facts."""
    ctx = FileContext(path, rules, index_file(tree), test=test)
    ctx.in_test_folder = test_folder
    FileVisitor(ctx).run(tree)
    return ctx

