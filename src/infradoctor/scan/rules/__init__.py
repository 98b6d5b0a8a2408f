"""Scan rules: one module per code (C001-C014), each declaring ``RULE`` and the hooks it subscribes to.

The hooks a rule module may define are listed in :mod:`infradoctor.scan.dispatch`.
"""
