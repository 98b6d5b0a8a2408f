"""The package layers, bottom up, with no import cycles between packages.

core (findings, result, stats, procs, redact, store, ...) -> domains (node, profile, load, route, logs, scan, serve,
fleet) -> workflows (compare, profile under load, demo) -> render (report) -> cli. A package imports only from its
own layer or a lower one; between domains the imports form no cycle. Read from the source's import statements
(those under ``if TYPE_CHECKING:`` too), so a cycle cannot hide behind a function-level import.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "infradoctor"

LAYERS: dict[str, int] = {
    # core
    "_lazy": 0, "environment": 0, "errors": 0, "findings": 0, "procs": 0, "redact": 0, "result": 0, "stats": 0,
    "store": 0, "xid": 0, "bounded": 0, "schema": 0, "metrics": 0, "__init__": 0,
    # domains
    "node": 1, "profile": 1, "load": 1, "route": 1, "logs": 1, "scan": 1, "serve": 1, "fleet": 1,
    "telemetry": 1,
    # workflows
    "compare": 2, "profile_load": 2, "demo": 2,
    # render
    "report": 3,
    # cli
    "cli": 4, "__main__": 4,
}
NAMES = ("core", "domain", "workflow", "render", "cli")


def package_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def imports_of(path: Path) -> set[str]:
    """Top-level infradoctor packages a module imports (anywhere in it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "infradoctor" and len(parts) > 1:
                found.add(parts[1])
    return found


def package_graph() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> modules that import it."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in SRC.rglob("*.py"):
        if "demo/workloads" in path.as_posix() or "profile/inject" in path.as_posix():
            continue  # user-style scripts and code injected into workloads: not library layers
        pkg = package_of(path)
        for target in imports_of(path):
            if target != pkg:
                graph.setdefault(pkg, {}).setdefault(target, []).append(str(path.relative_to(SRC)))
    return graph


def test_every_package_has_a_layer() -> None:
    packages = {package_of(p) for p in SRC.rglob("*.py")} | {p.name for p in SRC.iterdir() if p.is_dir()}
    packages -= {"__pycache__", "py.typed"}
    assert packages <= set(LAYERS), sorted(packages - set(LAYERS))


def test_no_package_imports_a_higher_layer() -> None:
    bad = []
    for pkg, targets in package_graph().items():
        for target, where in targets.items():
            if LAYERS.get(target, 0) > LAYERS[pkg]:
                bad.append(f"{pkg} ({NAMES[LAYERS[pkg]]}) imports {target} ({NAMES[LAYERS[target]]}): {where[:3]}")
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycle_between_packages() -> None:
    graph = {pkg: set(targets) for pkg, targets in package_graph().items()}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in stack:
                cycle = [*stack[stack.index(nxt):], nxt]
                if cycle[0] == min(cycle[:-1]):
                    cycles.append(" -> ".join(cycle))
            elif len(stack) < len(graph) + 1:
                visit(nxt, [*stack, nxt])

    for start in sorted(graph):
        visit(start, [start])
    assert not cycles, "\n".join(sorted(set(cycles)))
