"""infradoctor: finds out why an AI workload is slow or failing, and proves the fix."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
