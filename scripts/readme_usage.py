"""Keep the README's usage blocks equal to `infradoctor COMMAND --help`.

`python scripts/readme_usage.py` rewrites every block between `<!-- usage:NAME -->` and `<!-- /usage:NAME -->`;
`--check` exits 1 when one differs (the test suite runs the check).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"(<!-- usage:(?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- /usage:(?P=name) -->)", re.S)


def help_text(name: str) -> str:
    """The --help output of one command at a fixed width."""
    os.environ["COLUMNS"] = "100"
    from infradoctor.cli import build_parser

    parser = build_parser()
    if name == "infradoctor":
        return parser.format_help()
    sub = next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)  # noqa: SLF001
    ).choices[name]
    return sub.format_help()


def render(text: str) -> str:
    """README with every usage block regenerated."""

    def replace(match: re.Match[str]) -> str:
        body = "```text\n" + help_text(match.group("name")).rstrip() + "\n```\n"
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(replace, text)


def main() -> int:
    """Rewrite or check the README."""
    check = "--check" in sys.argv[1:]
    current = README.read_text(encoding="utf-8")
    wanted = render(current)
    if check:
        if current != wanted:
            print("README usage blocks differ from --help; run: python scripts/readme_usage.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
