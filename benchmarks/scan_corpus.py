"""Build a precision corpus for `infradoctor scan` from example code that installed packages ship.

Library authors' own examples are the closest thing to real user code on a machine without a network: this
extracts every doctest (`>>>` blocks) and every fenced ```python block from the docstrings of the installed
packages named on the command line, writes each as one file under OUT (`<package>/<module>__<n>.py`), and keeps
the ones that parse. Then `infradoctor scan OUT` shows what the rules find on them; findings are reviewed by hand.

    python benchmarks/scan_corpus.py /tmp/corpus torch fastapi starlette aiohttp uvicorn polars
"""

from __future__ import annotations

import ast
import doctest
import importlib.util
import re
import sys
import textwrap
from pathlib import Path

# Doctests run with these names already imported (torch's doctest runner provides them); the scan needs the imports.
PRELUDE = {"torch": "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n"}
FENCED = re.compile(r"```(?:python|py)\n(.*?)```", re.S)


def snippets(doc: str) -> list[str]:
    found = []
    try:
        examples = doctest.DocTestParser().get_examples(doc)
    except ValueError:
        examples = []
    if examples:
        found.append("".join(e.source for e in examples))
    found.extend(textwrap.dedent(block) for block in FENCED.findall(doc))
    return found


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    written = 0
    for package in argv[1:]:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            print(f"{package}: not installed", file=sys.stderr)
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(root.rglob("*.py")):
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            count = 0
            for node in ast.walk(tree):
                if not isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue
                doc = ast.get_docstring(node)
                if not doc or (">>>" not in doc and "```" not in doc):
                    continue
                for code in snippets(doc):
                    try:
                        ast.parse(code)
                    except (SyntaxError, ValueError):
                        continue
                    rel = path.relative_to(root).with_suffix("").as_posix().replace("/", ".")
                    target = out / package / f"{rel}__{count}.py"
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(PRELUDE.get(package, "") + code, encoding="utf-8")
                    count += 1
                    written += 1
    print(f"wrote {written} example files under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
