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

    Preview (off by default; ``--select C013`` runs it): it has never fired on the 36 repositories of the scan
    corpus (it missed the one real case found there, a GPU placement three files away), so nothing measures it yet.

Fix:
    One worker per GPU with request batching inside it (or a model server such as Triton, TorchServe, vLLM,
    Ray Serve with ``num_gpus``), and scale with more GPUs/replicas; or share weights (preload + fork).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from infradoctor.findings import Rule, Severity
from infradoctor.scan import launchers
from infradoctor.scan import values as V
from infradoctor.scan.context import CallInfo, FileContext, Hit, is_model_name
from infradoctor.scan.violations import Violation

RULE = Rule(
    "C013",
    "multi-worker-model-copy",
    Severity.MEDIUM,
    "Several server workers each load a GPU model",
    fix="Use one worker per GPU with batching, or a model server.",
    risk="Less CPU parallelism.",
    commands=("scan",),
    preview=True,
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
    if any(is_model_name(key) or ctx.key_kind(key) in V.MODEL_KINDS for key in call.assigned_to):
        return True
    if call.receiver_key is not None and ctx.is_model_expr(call.receiver):
        return True
    return isinstance(call.receiver, ast.Call) and ctx.kind_of(call.receiver) in V.MODEL_KINDS


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


# -- command lines in launcher files, and the other files they need -----------------------------------------------
Nearest = Callable[[Sequence[Path | str]], "tuple[str, dict[str, Any]] | None"]


def check_launcher(text: str, display: str, file_kind: str, lines: Sequence[str]
                   ) -> list[tuple[tuple[str, str], Violation]]:
    """Multi-worker servers started by a launcher file; each counts only if its app's module puts a model on the GPU.

    The launcher's own module is named by the command line (``gunicorn -w 4 pkg.main:app``); the engine finds it
    among the scanned files and calls :func:`resolve_cross_file`.
    """
    found: list[tuple[tuple[str, str], Violation]] = []
    for launch in launchers.launches(text, file_kind):
        line = lines[launch.line - 1] if 0 < launch.line <= len(lines) else ""
        evidence: dict[str, Any] = {"workers": launch.workers, "app": launch.app, "launcher": file_kind}
        if launch.from_env:
            evidence["workers_from"] = "WEB_CONCURRENCY"
        if launch.config is not None:  # the worker count comes from gunicorn's configuration file, if scanned
            evidence.update(server=launch.server, config=launch.config)
        message = launch_message(launch.server, launch.workers, "WEB_CONCURRENCY" if launch.from_env else None)
        found.append(((GPU_FACT, launch.module), Violation(
            code=RULE.code, path=display, line=launch.line, column=launch.column + 1, end_line=launch.line,
            end_column=launch.end_column + 1, message=message, evidence=evidence, function=None,
            line_text=line.strip(),
        )))
    return found


def resolve_cross_file(violation: Violation, display: str, provider: tuple[str, dict[str, Any]], fact: str,
                       nearest: Nearest) -> Violation | None:
    """A server whose app's module puts a model on the GPU: name the model's file and line; settle gunicorn's count.

    A command-line gunicorn that leaves the worker count to its configuration file takes the file's ``workers``
    when the scan read it (a relative ``-c`` path from the launcher's folder or one above it, the nearest; an
    absolute one, as in a container, by its name there), else ``WEB_CONCURRENCY`` from the launcher; None when that
    makes one worker.
    """
    target_display, facts = provider
    violation = replace(violation, evidence={**violation.evidence, "model_path": target_display,
                                             fact.split(".", 1)[-1]: facts[fact]})
    config = violation.evidence.get("config")
    if config is None:
        return violation
    entry = nearest([Path(config).name if Path(config).is_absolute() else config])
    workers = entry[1].get(WORKERS_FACT) if entry is not None else None
    evidence = {k: v for k, v in violation.evidence.items() if k not in ("config", "server")}
    if workers is None:  # not scanned, or no workers there: WEB_CONCURRENCY or the default of one
        return replace(violation, evidence=evidence) if evidence["workers"] else None
    if workers.isascii() and workers.isdigit() and workers.lstrip("0") in ("", "1"):
        return None
    assert entry is not None
    evidence.update(workers=workers, workers_from=entry[0])
    message = launch_message(violation.evidence["server"], workers, entry[0])
    return replace(violation, evidence=evidence, message=message)
