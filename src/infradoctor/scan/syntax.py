"""Small helpers over Python syntax trees that the scan modules share."""

from __future__ import annotations

import ast

from infradoctor.scan import knowledge as K


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


def subscript_key(node: ast.AST | None) -> str | None:
    """``request.app.model`` for ``request.app["model"]``, else None.

    An entry of a container under a name-like string key: aiohttp's app state, a dict of models.
    """
    if not isinstance(node, ast.Subscript):
        return None
    key = node.slice
    if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.isidentifier()):
        return None
    base = dotted(node.value)
    return f"{base}.{key.value}" if base is not None else None


def root_key(node: ast.AST | None) -> str | None:
    """Dotted name of the value a method chain starts from: ``model`` for ``model.to(dev).half()``/``x[0]``."""
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return dotted(node)


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def names_in(node: ast.AST) -> set[str]:
    """Every plain name in an expression (a hand-rolled walk: this runs for every assignment)."""
    if isinstance(node, ast.Name):
        return {node.id}
    found: set[str] = set()
    stack = [node]
    fields_of = _CHILD_FIELDS
    name_type, ast_type = ast.Name, ast.AST
    while stack:
        current = stack.pop()
        cls = current.__class__
        if cls is name_type:
            found.add(current.id)  # type: ignore[attr-defined]
            continue
        fields = fields_of.get(cls)
        if fields is None:
            fields = tuple(f for f in cls._fields if f not in ("ctx", "type_comment", "kind"))
            fields_of[cls] = fields
        for name in fields:
            value = getattr(current, name, None)
            if value.__class__ is list:
                stack.extend(v for v in value if isinstance(v, ast_type))
            elif isinstance(value, ast_type):
                stack.append(value)
    return found


def is_model_name(key: str | None) -> bool:
    """A dotted name that reads as a model (``model``, ``self.model``, ``text_encoder``)."""
    if not key:
        return False
    last = key.rsplit(".", 1)[-1].lower()
    return last not in K.NOT_MODEL_NAMES and last not in K.PYDANTIC_METHODS and K.MODEL_NAME_RE.match(last) is not None


def mentions_cuda(node: ast.AST) -> bool:
    """A string constant containing ``cuda`` appears in the expression."""
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and "cuda" in n.value for n in ast.walk(node))


def chain_has(node: ast.AST, names: tuple[str, ...] | frozenset[str]) -> bool:
    """A method chain (``Net().to(d).eval()``) includes a call to one of ``names``."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in names:
            return True
        node = node.func.value
    return False


def call_name(node: ast.Call) -> str | None:
    """The called name: ``load`` for ``torch.load(...)``, ``f`` for ``f(...)``."""
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def keyword(node: ast.Call, name: str) -> ast.keyword | None:
    """The keyword argument ``name=...`` of a call, if given."""
    for kw in node.keywords:
        if kw.arg == name:
            return kw
    return None


def is_const(node: ast.AST | None, *values: object) -> bool:
    """The node is a constant equal to one of ``values`` (``True`` is not ``1`` here)."""
    return isinstance(node, ast.Constant) and any(
        node.value is v if isinstance(v, bool) or v is None else (node.value == v and not isinstance(node.value, bool))
        for v in values)
