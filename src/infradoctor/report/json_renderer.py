"""JSON: the result contract; a list when several results are rendered together."""

from __future__ import annotations

import json
from collections.abc import Sequence

from infradoctor.bounded import json_printable
from infradoctor.report.base import Renderer
from infradoctor.result import Result


class JsonRenderer(Renderer):
    """One result as its JSON object, several as a JSON array."""

    format = "json"

    def __init__(self, indent: int | None = 2) -> None:
        self.indent = indent

    def render(self, results: Sequence[Result]) -> str:
        """Serialised JSON, strict (no NaN)."""
        if len(results) == 1:
            return results[0].to_json(indent=self.indent) + "\n"
        payload = [r.to_dict() for r in results]
        return json_printable(json.dumps(payload, indent=self.indent, ensure_ascii=False, allow_nan=False)) + "\n"


RENDERER_CLASS = JsonRenderer
