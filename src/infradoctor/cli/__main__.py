"""``python -m infradoctor.cli``."""

from infradoctor.cli import console_main

console_main()
