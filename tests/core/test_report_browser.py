"""The HTML report rendered by a real headless Chromium: structure from the live DOM, looks from a screenshot."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from infradoctor.report.writeup import build_writeup
from infradoctor.report.writeup_render import to_html
from infradoctor.result import Result
from infradoctor.store import RunStore
from tests.core.test_report import runs

STORED_RUNS = Path(__file__).parents[1] / "fixtures" / "report"

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


# Added to a copy of the page only (the report itself has no script): where Chromium drew every chart's text.
MEASURE = """<script>
window.addEventListener("load", () => {
  const charts = [];
  for (const svg of document.querySelectorAll("svg.chart")) {
    const box = svg.getBoundingClientRect();
    const texts = [];
    for (const el of svg.querySelectorAll("text")) {
      const r = el.getBoundingClientRect();
      const own = Array.from(el.childNodes).filter(n => n.nodeType === 3).map(n => n.data).join("");
      texts.push({text: own, left: r.left - box.left, right: r.right - box.left, top: r.top - box.top,
                  bottom: r.bottom - box.top});
    }
    const ys = Array.from(svg.querySelectorAll("circle")).map(c => c.getBoundingClientRect().top - box.top);
    charts.push({title: svg.getAttribute("aria-label"), width: box.width, height: box.height, texts: texts,
                 circle_tops: ys});
  }
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify({charts: charts, scroll_width: document.documentElement.scrollWidth,
                                    client_width: document.documentElement.clientWidth});
  document.body.appendChild(out);
});
</script>"""


@pytest.mark.integration
def test_report_from_stored_runs_draws_whole_charts(tmp_path: Path, cli, isolated_store: Path) -> None:
    """Real stored runs (a load pair whose latencies are three orders of magnitude apart, each with a knee; a profile
    pair whose memory timelines differ in length) through `infradoctor report`, measured as Chromium lays it out."""
    Image = pytest.importorskip("PIL.Image")
    store = RunStore(isolated_store)
    for name in ("load-baseline", "load-after", "batch-baseline", "batch-after"):
        store.save(Result.from_dict(json.loads((STORED_RUNS / f"{name}.json").read_text(encoding="utf-8"))))
    page = tmp_path / "report.html"
    run = cli("report", "-o", str(page))
    assert run.exit_code == 0, run.stderr
    html = page.read_text(encoding="utf-8")
    assert "<script" not in html
    measured_page = tmp_path / "measured.html"
    # the page forbids scripts (CSP); the copy that measures it lifts that
    measured = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html)
    assert measured != html
    measured_page.write_text(measured.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    base = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1100,2400"]
    dom = subprocess.run([*base, "--virtual-time-budget=5000", "--dump-dom", measured_page.as_uri()],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    start = dom.index('<pre id="measured">') + len('<pre id="measured">')
    layout = json.loads(_unescape(dom[start:dom.index("</pre>", start)]))
    charts = {c["title"]: c for c in layout["charts"]}
    assert {"Latency vs load", "Memory over steps", "Time per sample by phase"} <= set(charts), list(charts)
    assert layout["scroll_width"] <= layout["client_width"]  # nothing overflows the page sideways

    latency = charts["Latency vs load"]
    texts = [t["text"] for t in latency["texts"]]
    assert "latency (ms) (log scale)" in texts
    assert {"knee (serve-baseline)", "knee (serve-after)"} <= set(texts)
    ticks = sorted((t["top"], t["text"]) for t in latency["texts"] if t["right"] <= 62 and t["text"][:1].isdigit())
    values = [float(text.rstrip("k")) * (1000 if text.endswith("k") else 1) for _, text in ticks][::-1]
    ratios = {round(b / a, 6) for a, b in zip(values, values[1:], strict=False)}
    assert len(values) >= 3 and ratios <= {2.0, 2.5, 10.0, 100.0}, values
    top_tick = ticks[0][0]
    assert all(y >= top_tick - 6 for y in latency["circle_tops"])  # label top is ~4 px above its tick's line

    memory = charts["Memory over steps"]
    assert "% of the run's steps" in [t["text"] for t in memory["texts"]]
    bars = [t["text"] for t in charts["Time per sample by phase"]["texts"]]
    assert any(t.endswith(" ms") for t in bars)
    for chart in layout["charts"]:
        for text in chart["texts"]:
            assert text["left"] >= -0.5 and text["right"] <= chart["width"] + 0.5, (chart["title"], text)
            assert text["top"] >= -0.5 and text["bottom"] <= chart["height"] + 0.5, (chart["title"], text)

    shot = tmp_path / "stored-runs.png"
    subprocess.run([*base, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120, check=True)
    image = Image.open(shot).convert("RGB")
    colors = image.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 50


def _unescape(text: str) -> str:
    from html import unescape

    return unescape(text)
