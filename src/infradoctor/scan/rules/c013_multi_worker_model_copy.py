"""C013 multi-worker-model-copy: several server workers each load their own copy of a GPU model.

What it detects:
    A server started with more than one worker process (``uvicorn.run(..., workers=N)`` or
    ``uvicorn.Config(..., workers=N)`` with N > 1 or not a literal, a gunicorn configuration file with
    ``workers = N`` and ``wsgi_app = "pkg.main:app"``, or a command line in a Dockerfile, Procfile, shell script,
    Compose file or Kubernetes manifest: ``uvicorn pkg.main:app --workers N``, ``gunicorn -w N ... pkg.main:app``,
    ``hypercorn -w N``, also as ``python -m`` and with ``WEB_CONCURRENCY`` set in the same file) whose app puts a
    model on the GPU (``model.cuda()``, ``model.to("cuda")``, ``.to(device)`` with a CUDA device, a load with
    ``device="cuda"`` or ``device_map=...``): in the same file, or in the app's module named by an import string
    (``uvicorn.run("pkg.main:app", ...)``, ``wsgi_app``, the command line's app) when that module is among the
    scanned files.

Why it matters:
    Each worker process imports the app and loads the model: N copies of the weights on the same GPU, N CUDA
    contexts (hundreds of MB each), and kernels from N processes time-sliced on one device. Memory runs out at
    small N and latency rises (S004 at run time).

How it is measured:
    Statically: worker counts from the server call's keywords or the gunicorn file's module-level assignments;
    GPU placement from calls on model-like names. An import string is resolved against the scanned files as
    Python would when started from the launcher's folder or one above it (``pkg.main`` is ``pkg/main.py`` or
    ``pkg/main/__init__.py``, the nearest one deciding); the finding's evidence then names the model's file and line.
    Gunicorn configuration files are ``gunicorn.conf.py`` and the like (``gunicorn_conf.py``,
    ``gunicorn.prod.conf.py``, ``gunicorn_config.py``). Launcher files are ``Dockerfile``/``Containerfile``
    (``CMD``, ``ENTRYPOINT``, ``RUN``; exec and shell forms, ``sh -c`` opened up), ``Procfile``, ``*.sh`` and
    ``docker-compose.yml``/``compose.yaml`` (``command:``, ``entrypoint:``) and other YAML files that hold a Kubernetes
    workload (a container's ``command`` and ``args``; read without a YAML library: scalars, flow and block lists,
    block scalars); commands are read, not run, so a worker count in a
    variable stays as written and counts as more than one (unless its default is one: ``${WORKERS:-1}``); shell
    here-documents and multi-line strings are not commands. gunicorn started without a worker count takes it from
    its configuration file when the scan reads that file (``-c FILE``, else ``gunicorn.conf.py``, as gunicorn reads
    it from its working directory: the nearest from the launcher's folder upward; the file's ``workers`` wins over
    ``WEB_CONCURRENCY``). Not followed: ``--app-dir``/``--chdir`` (the module is looked up from the launcher's
    folder), ``-c python:module``, configuration files not named like gunicorn's, YAML anchors and Helm values. A
    ``# noqa: C013`` on the command's line or on a comment line just above silences it.

Fix:
    One worker per GPU with request batching inside it (or a model server such as Triton, TorchServe, vLLM,
    Ray Serve with ``num_gpus``), and scale with more GPUs/replicas; or share weights (preload + fork).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from infradoctor.findings import Rule, Severity
from infradoctor.scan.visitor import CallInfo, FileContext, Hit, is_model_name

RULE = Rule(
    "C013",
    "multi-worker-model-copy",
    Severity.MEDIUM,
    "Several server workers each load a GPU model",
    fix="Use one worker per GPU with batching, or a model server.",
    risk="Less CPU parallelism.",
    commands=("scan",),
)
CALL_NAMES = frozenset({"run", "Config", "cuda", "to"})
NODES = (ast.Assign, ast.AnnAssign)
GPU_FACT = "C013.gpu_model_line"
"""What a file that puts a model on the GPU tells launchers in other files: the line where it does."""
WORKERS_FACT = "C013.gunicorn_workers"
"""What a gunicorn configuration file tells a command line that reads it: its ``workers`` as written."""


def launch_message(server: str, workers: str, source: str | None = None) -> str:
    """The message for a command line that starts ``server`` with ``workers`` workers.

    ``source``: where the count was set, when not on the command line (a configuration file, ``WEB_CONCURRENCY``).
    """
    if source == "WEB_CONCURRENCY":
        how = f"with WEB_CONCURRENCY={workers}"
    else:
        how = f"with workers = {workers} from {source}" if source else f"--workers {workers}"
    return f"{server} {how} starts several processes and each loads its own copy of the GPU model"


def _state(ctx: FileContext) -> dict[str, Any]:
    state: dict[str, Any] = ctx.data.setdefault(RULE.code, {"servers": [], "gpu": [], "gunicorn": {}})
    return state


def _workers(value: ast.expr) -> str | None:
    """The worker count as written, or None when it is a literal of at most 1."""
    if isinstance(value, ast.Constant) and isinstance(value.value, int) and value.value <= 1:
        return None
    return str(value.value) if isinstance(value, ast.Constant) else ast.unparse(value)


def _app_module(value: ast.expr | None) -> str | None:
    """``pkg.main`` from an import string ``"pkg.main:app"``."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str) and ":" in value.value:
        module = value.value.split(":", 1)[0].strip()
        if module and all(part.isidentifier() for part in module.split(".")):
            return module
    return None


def check(call: CallInfo, ctx: FileContext) -> None:
    """Collect worker counts and GPU placement of models."""
    state = _state(ctx)
    node = call.node
    if call.name in ("run", "Config") and call.qualname in ("uvicorn.run", "uvicorn.Config"):
        kw = call.keyword("workers")
        if kw is None:
            return
        workers = _workers(kw.value)
        if workers is None:
            return
        app_kw = call.keyword("app")
        app = node.args[0] if node.args else (app_kw.value if app_kw is not None else None)
        module = _app_module(app)
        evidence: dict[str, Any] = {"workers": workers}
        if module is not None:
            evidence["app"] = app.value  # type: ignore[union-attr]
        state["servers"].append((ctx.make_hit(
            RULE.code, node, f"{call.qualname}(workers={workers}) starts several processes and each loads its own copy "
            "of the GPU model", evidence), module))
    elif call.name in ("cuda", "to") and _on_model(call, ctx) and (
            call.name == "cuda" or any(ctx.is_cuda_expr(a) for a in node.args) or any(
                kw.arg == "device" and ctx.is_cuda_expr(kw.value) for kw in node.keywords)):
        state["gpu"].append(ctx.make_hit(RULE.code, node, "", {}))


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
    state = _state(ctx)
    for kw in call.node.keywords:
        if (kw.arg == "device" and ctx.is_cuda_expr(kw.value)) or kw.arg == "device_map":
            state["gpu"].append(ctx.make_hit(RULE.code, call.node, "", {}))


def check_node(node: ast.AST, ctx: FileContext) -> None:
    """Module-level ``workers = N`` and ``wsgi_app = "pkg.main:app"`` in a gunicorn configuration file."""
    if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None or ctx.scope.kind != "module":
        return
    if not GUNICORN_CONFIG.match(ctx.path.replace("\\", "/").rsplit("/", 1)[-1]):
        return
    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
        if isinstance(target, ast.Name) and target.id in ("workers", "wsgi_app"):
            _state(ctx)["gunicorn"][target.id] = node


GUNICORN_CONFIG = re.compile(r"gunicorn([._-][\w.-]*)?[._-]conf(ig)?([._-][\w.-]*)?\.py$", re.IGNORECASE)
"""gunicorn.conf.py (gunicorn's default), gunicorn_conf.py, gunicorn.prod.conf.py, gunicorn_config.py, ..."""


def file_end(ctx: FileContext) -> None:
    """Report multi-worker servers whose app puts a model on the GPU: here, or (deferred) in the app's module."""
    state: dict[str, Any] | None = ctx.data.get(RULE.code)
    if not state:
        return
    servers: list[tuple[Hit, str | None]] = list(state["servers"])
    gunicorn = state["gunicorn"]
    if "workers" in gunicorn:
        value = gunicorn["workers"].value
        ctx.facts[WORKERS_FACT] = str(value.value) if isinstance(value, ast.Constant) else ast.unparse(value)
    if "workers" in gunicorn and "wsgi_app" in gunicorn:
        workers = _workers(gunicorn["workers"].value)
        module = _app_module(gunicorn["wsgi_app"].value)
        if workers is not None and module is not None:
            app = gunicorn["wsgi_app"].value.value
            servers.append((ctx.make_hit(
                RULE.code, gunicorn["workers"], f"gunicorn workers = {workers} starts several processes and each loads "
                "its own copy of the GPU model", {"workers": workers, "app": app}), module))
    if state["gpu"]:
        line = state["gpu"][0].line
        ctx.facts[GPU_FACT] = line
        for hit, _ in servers:
            hit.evidence["gpu_model_line"] = line
            ctx.hits.append(hit)
        return
    for hit, module in servers:
        if module is not None:  # counts only if the scan also reads that module and it loads a GPU model
            hit.requires = (GPU_FACT, module)
            ctx.hits.append(hit)
