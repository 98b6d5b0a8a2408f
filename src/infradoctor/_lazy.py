"""Lazy package exports: a package's public names are imported from their modules on first use (PEP 562).

A package ``__init__`` that imported its submodules made every import of one of them import the whole package
(``infradoctor.load.spec`` pulled in the load engine); with this the CLI imports only what the command it runs
needs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``name`` from ``exports[name]`` (a submodule of ``package``)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
