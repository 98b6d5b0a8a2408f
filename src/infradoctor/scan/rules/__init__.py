"""Scan rules: one module per code (C001-C014), each with ``CODE``, the fixed docstring sections and its hooks.

Hooks a rule module may define (see :class:`infradoctor.scan.visitor.RuleSet`): ``CALL_NAMES`` + ``check(call, ctx)``
for calls by method/function name, ``check_model_call(call, ctx)``, ``check_model_load(call, ctx)``,
``NODES`` + ``check_node(node, ctx)``, ``loop_end(frame, ctx)``, ``scope_end(scope, ctx)``, ``file_end(ctx)``.
"""
