"""The node rules N001-N010 and N012, one module each, over a :class:`~infradoctor.node.evidence.NodeEvidence`.

N001, N006 and N009 also read logs (:class:`~infradoctor.logs.evidence.LogsEvidence`). N011 (gpu-oom) needs a
workload's output and lives with the profile rules.
"""

from __future__ import annotations

from infradoctor.node.rules._common import NodeOptions

__all__ = ["NodeOptions"]
