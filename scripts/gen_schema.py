"""Write the typed metrics of every command into the shipped JSON Schema (``$defs`` + ``allOf`` by command).

`python scripts/gen_schema.py` rewrites src/infradoctor/schema/result.schema.json from the metrics dataclasses
(:data:`infradoctor.metrics.METRICS_CLASSES`); `--check` exits 1 when the file differs (the test suite runs it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SCHEMA = Path(__file__).resolve().parents[1] / "src" / "infradoctor" / "schema" / "result.schema.json"
BASE_DEFS = ("finding", "error")
"""Hand-written ``$defs`` of the result envelope; every other entry is generated."""


def generate() -> str:
    sys.path.insert(0, str(SCHEMA.parents[2]))
    from infradoctor.metrics import schema_defs

    doc = json.loads(SCHEMA.read_text(encoding="utf-8"))
    defs, clauses = schema_defs()
    doc["$defs"] = {**{k: doc["$defs"][k] for k in BASE_DEFS}, **defs}
    doc["allOf"] = clauses
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the schema file is not up to date")
    args = parser.parse_args()
    text = generate()
    if args.check:
        if SCHEMA.read_text(encoding="utf-8") != text:
            print("result.schema.json is not up to date; run: python scripts/gen_schema.py", file=sys.stderr)
            return 1
        return 0
    SCHEMA.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
