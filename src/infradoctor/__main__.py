"""``python -m infradoctor``."""

from infradoctor.cli import console_main

console_main()
