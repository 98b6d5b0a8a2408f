"""Presenters: one module per command, each with ``sections(result) -> list[Section]`` for the renderers."""
