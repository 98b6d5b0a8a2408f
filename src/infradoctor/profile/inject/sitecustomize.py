"""Put on ``PYTHONPATH`` by ``infradoctor profile`` (and ``profile --load-url``): the one injected start-up hook.

What it installs depends on the environment the launcher set:

- ``INFRADOCTOR_PROFILE_DIR`` (``profile``): in the profiled program's own interpreter the runner activates the
  recorder itself (``INFRADOCTOR_PROFILE_ROLE=runner``) and nothing more happens here; in other Python processes
  of the run (spawned DataLoader workers, or the program itself when the command was not ``python ...``) the
  instrumentation is installed for when ``torch`` is imported.
- ``INFRADOCTOR_SERVE_DIR`` (``profile --load-url``): :mod:`infradoctor.serve.autoattach` watches the server's
  event loop.

Then it imports the ``sitecustomize`` it shadows (a later one on ``sys.path``), so a project's own sitecustomize
still runs. Nothing here may break the program: a failure is one line on stderr.
"""

from __future__ import annotations

import importlib
import os
import sys


def _install_profile() -> None:
    events_dir = os.environ.get("INFRADOCTOR_PROFILE_DIR")
    if not events_dir:
        return
    try:
        from infradoctor.profile import instrument

        role = os.environ.get("INFRADOCTOR_PROFILE_ROLE")
        if role == "runner":
            return  # the runner activates the recorder in this process itself
        if role == "any":
            os.environ["INFRADOCTOR_PROFILE_ROLE"] = "child"
            instrument.activate(events_dir, "main", list(sys.argv))
        else:
            instrument.activate_worker_support()
    except Exception as exc:  # noqa: BLE001 - never break the program
        sys.stderr.write(f"infradoctor profile: not instrumenting this process: {type(exc).__name__}: {exc}\n")


def _install_serve() -> None:
    if not os.environ.get("INFRADOCTOR_SERVE_DIR"):
        return
    try:
        from infradoctor.serve import autoattach

        autoattach.install_from_env()
    except Exception as exc:  # noqa: BLE001 - never break the server
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


_install_profile()
_install_serve()
_chain()
