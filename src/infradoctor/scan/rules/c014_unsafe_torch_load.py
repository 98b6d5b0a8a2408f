"""C014 unsafe-torch-load: ``torch.load`` can run arbitrary code from the file it reads.

What it detects:
    ``torch.load(...)`` (through any alias, e.g. ``from torch import load as tl``) without ``weights_only=True``,
    or with ``weights_only=False``. Not reported when ``weights_only`` is a variable or ``**kwargs`` is passed.

Why it matters:
    Without ``weights_only=True``, ``torch.load`` unpickles: a crafted checkpoint runs any code on load.
    Checkpoints downloaded from a hub or shared storage are untrusted input. torch 2.6 changed the default to
    True; code that relies on the old default behaves differently across versions.

How it is measured:
    Statically, from the call's keywords.

Fix:
    ``torch.load(path, weights_only=True)``. ``infradoctor scan --fix`` adds it where the keyword is missing
    (a safe fix: it is the default from torch 2.6 on, so behaviour on current torch does not change). An explicit
    ``weights_only=False`` is left for a person to decide. Checkpoints that pickle custom classes need
    ``torch.serialization.add_safe_globals([...])``.
"""

from __future__ import annotations

import ast

from infradoctor.findings import Rule, Severity
from infradoctor.scan.visitor import CallInfo, Edit, FileContext

RULE = Rule(
    "C014",
    "unsafe-torch-load",
    Severity.MEDIUM,
    "torch.load without weights_only=True",
    fix="Pass weights_only=True (the default from torch 2.6).",
    risk="Checkpoints that pickle custom objects need torch.serialization.add_safe_globals.",
    commands=("scan",),
)
CALL_NAMES = frozenset({"load"})
FIX_DESCRIPTION = "added weights_only=True to torch.load(...)"


def check(call: CallInfo, ctx: FileContext) -> None:
    """Report torch.load without weights_only=True, with a fix where the keyword is missing."""
    if call.qualname != "torch.load" or call.has_star_kwargs:
        return
    kw = call.keyword("weights_only")
    if kw is None:
        node = call.node
        parts: list[ast.expr] = [*node.args, *(k.value for k in node.keywords)]
        edit = None
        if parts:
            last = max(parts, key=lambda p: (p.end_lineno or 0, p.end_col_offset or 0))
            if last.end_lineno is not None and last.end_col_offset is not None:
                edit = Edit(last.end_lineno, last.end_col_offset, ", weights_only=True", FIX_DESCRIPTION)
        ctx.report(RULE.code, node, "torch.load() without weights_only=True unpickles arbitrary code; pass "
                   "weights_only=True", {"weights_only": None}, edit=edit)
    elif isinstance(kw.value, ast.Constant) and kw.value.value is False:
        ctx.report(RULE.code, call.node, "torch.load(weights_only=False) unpickles arbitrary code from the file",
                   {"weights_only": False})
