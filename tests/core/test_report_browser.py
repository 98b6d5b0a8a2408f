"""The HTML report rendered by a real headless Chromium: structure from the live DOM, looks from a screenshot."""

import shutil
import subprocess
from pathlib import Path

import pytest

from infradoctor.report.writeup import build_writeup
from infradoctor.report.writeup_render import to_html
from tests.core.test_report import runs

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not path:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return path


@pytest.mark.integration
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    Image = pytest.importorskip("PIL.Image")
    page = tmp_path / "report.html"
    page.write_text(to_html(build_writeup(runs(), resamples=100)), encoding="utf-8")
    base = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=True)
    html = dom.stdout
    for section in ("summary", "method", "findings", "changes", "charts", "risks", "next-steps"):
        assert f'id="{section}"' in html, section
    assert html.count("<svg") >= 1 and "<polyline" in html
    assert "<script" not in html  # the hostile strings stayed text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html

    shot = tmp_path / "report.png"
    subprocess.run([*base, f"--screenshot={shot}", "--window-size=1100,2400", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    image = Image.open(shot).convert("RGB")
    assert image.size == (1100, 2400)
    colors = image.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 50  # text, tables and charts, not a blank page
    pixels = {rgb for _, rgb in colors}
    blue, green = (0x2E, 0x86, 0xC1), (0x27, 0xAE, 0x60)  # the chart's first and third series
    assert any(_near(p, blue) for p in pixels) and any(_near(p, green) for p in pixels)
    top = image.crop((0, 0, 1100, 300)).getcolors(maxcolors=1 << 20)
    assert top is not None and len(top) > 5  # the title and summary are drawn at the top


def _near(a: tuple[int, int, int], b: tuple[int, int, int], tol: int = 6) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))
