"""Put on ``PYTHONPATH`` by ``infradoctor profile --load-url``: watch the server's event loop, then chain.

It installs :mod:`infradoctor.serve.autoattach` when ``INFRADOCTOR_SERVE_DIR`` is set, and then imports the
``sitecustomize`` it shadows (a later one on ``sys.path``), so a project's own sitecustomize still runs.
"""

from __future__ import annotations

import importlib
import os
import sys


def _install() -> None:
    if not os.environ.get("INFRADOCTOR_SERVE_DIR"):
        return
    try:
        from infradoctor.serve import autoattach

        autoattach.install_from_env()
    except Exception as exc:  # never break the server
        sys.stderr.write(f"infradoctor: not watching the event loop: {type(exc).__name__}: {exc}\n")


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    saved = list(sys.path)
    this = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if this is not None:
            sys.modules["sitecustomize"] = this


_install()
_chain()
