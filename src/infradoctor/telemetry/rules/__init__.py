"""Model-server rules S010-S013: one module per code, each declaring ``RULE`` and its check.

Each reads
:class:`~infradoctor.telemetry.evidence.ServerEvidence` (a server's own metrics point by point of a sweep).
"""
