"""The load rules, one module each, over one :class:`~infradoctor.load.evidence.LoadEvidence`.

Every rule reads only points where the load generator was not saturated (``LoadEvidence.valid_points``), except
S009 which reports the saturated ones. S007 (client timeout) lives with the route rules, which emit it too.
"""
