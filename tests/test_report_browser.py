"""report.html in a real headless browser (issue 20 item 1): Debian's Chromium lays the page
out, takes a screenshot, and the test reads each level badge's pixels back from that
screenshot (its background and the text colour most unlike it) to check the contrast ratio;
every chart label must lie inside its chart (an SVG clips what falls outside it), and the
page must log nothing to the console.

Chromium runs from its command line only (--dump-dom, --screenshot): no driver library and
no downloaded browser. The screenshot's pixels are decoded by Chromium too (a canvas in a
second page), so no image library is needed. Skipped, with the reason, without Chromium:
`apt-get install -y chromium` (Debian) provides it."""

from __future__ import annotations

import base64
import copy
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from porter.levels import Level
from porter.pipeline import RunOptions, run_target
from porter.report.html import render_html

import test_pipeline_support as fam

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on PATH (Debian: apt-get install -y chromium); "
                                                         "the report's browser checks need one")

WIDTH = 1400
AA_NORMAL_TEXT = 4.5     # WCAG 2 AA contrast for normal-size text (the badges are 12.5 px bold)


def _chromium(args: list[str], profile: Path, timeout: int = 90) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-extensions", "--force-device-scale-factor=1", "--enable-logging=stderr", "--v=0",
           f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _console_lines(stderr: str) -> list[str]:
    """What the page logged to the console (Chromium prints it as INFO:CONSOLE lines)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def _dumped_json(dom: str, element_id: str) -> dict:
    m = re.search(rf"<pre id=\"{element_id}\">(.*?)</pre>", dom, re.S)
    assert m, f"the probe script wrote no #{element_id}: {dom[-500:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                      .replace("&amp;", "&"))


# Runs in the report page itself (a copy of it): errors the page raises, the badges' places,
# and every SVG text's box against its SVG's box.
_PROBE = """
<script>
(function () {
  const seen = [];
  window.addEventListener('error', e => seen.push('error: ' + (e.message || (e.target && e.target.outerHTML))), true);
  const original = console.error;
  console.error = (...a) => { seen.push('console.error: ' + a.join(' ')); original(...a); };
  window.__porterProbe = () => {
    const box = el => { const b = el.getBoundingClientRect();
      return {x: b.left + scrollX, y: b.top + scrollY, w: b.width, h: b.height}; };
    const badges = [...document.querySelectorAll('.lvl')].map(el => ({text: el.textContent, ...box(el)}));
    const cut = [];
    let texts = 0;
    for (const svg of document.querySelectorAll('svg')) {
      const s = svg.getBoundingClientRect();
      for (const t of svg.querySelectorAll('text')) {
        texts++;
        const b = t.getBoundingClientRect();
        if (b.left < s.left - 0.5 || b.right > s.right + 0.5 || b.top < s.top - 0.5 || b.bottom > s.bottom + 0.5)
          cut.push({text: t.textContent, text_box: [b.left, b.top, b.right, b.bottom],
                    svg_box: [s.left, s.top, s.right, s.bottom]});
      }
    }
    const pre = document.createElement('pre');
    pre.id = 'porter-probe';
    pre.textContent = JSON.stringify({badges, cut, texts, errors: seen,
                                      height: document.documentElement.scrollHeight,
                                      width: document.documentElement.scrollWidth});
    document.body.appendChild(pre);
  };
})();
</script>
"""

# Runs in a second page holding the screenshot: for each badge's box, the most frequent
# colour (its background) and the pixel most unlike it (its text), and their contrast ratio.
_SAMPLER = """<!DOCTYPE html><html><body><canvas id="c"></canvas><script>
const badges = %s;
const img = new Image();
img.onload = () => {
  const c = document.getElementById('c');
  c.width = img.width; c.height = img.height;
  const g = c.getContext('2d');
  g.drawImage(img, 0, 0);
  const lum = p => { const f = v => { v /= 255; return v <= 0.04045 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(p[0]) + 0.7152 * f(p[1]) + 0.0722 * f(p[2]); };
  const ratio = (a, b) => { const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x); return (hi + 0.05) / (lo + 0.05); };
  const out = badges.map(b => {
    const x = Math.round(b.x) + 1, y = Math.round(b.y) + 1, w = Math.max(1, Math.round(b.w) - 2),
          h = Math.max(1, Math.round(b.h) - 2);
    const d = g.getImageData(x, y, w, h).data;
    const counts = new Map();
    for (let i = 0; i < d.length; i += 4) { const k = d[i] + ',' + d[i+1] + ',' + d[i+2];
      counts.set(k, (counts.get(k) || 0) + 1); }
    const bg = [...counts.entries()].sort((p, q) => q[1] - p[1])[0][0].split(',').map(Number);
    let best = 1, fg = bg;
    for (let i = 0; i < d.length; i += 4) { const p = [d[i], d[i+1], d[i+2]]; const r = ratio(p, bg);
      if (r > best) { best = r; fg = p; } }
    return {text: b.text, background: bg, text_colour: fg, contrast: best};
  });
  const pre = document.createElement('pre'); pre.id = 'porter-pixels';
  pre.textContent = JSON.stringify({width: img.width, height: img.height, badges: out});
  document.body.appendChild(pre);
};
img.src = 'data:image/png;base64,%s';
</script></body></html>
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A real report (the fake family through the pipeline), with one kernel at every
    level and a simulator record, so every badge and the emulation section are drawn."""
    root = tmp_path_factory.mktemp("browser")
    tpl = fam.write_templates(root / "tpl")
    book = root / "rb.yaml"
    book.write_text(fam.RUNBOOK)
    with pytest.MonkeyPatch.context() as mp:
        fam.install(mp, tpl, "browser")
        run = run_target(RunOptions("blackwell", runbook=str(book), out=root / "out", jobs=1))
    assert run.exit_code == 0
    r = json.loads((root / "out" / "report.json").read_text())
    model = r["kernels"][0]
    r["kernels"] = []
    for lvl in Level:
        k = copy.deepcopy(model)
        k["name"] = k["variant"] = f"fake.{lvl.label}"
        k["level"] = lvl.label
        if lvl >= Level.EMULATED:   # what porter.runtime.emulated_runs records for a run
            k["emulation"] = {"status": "passed", "reason": "", "seconds": 0.41, "note": "",
                              "runs": [{"warp_instructions": 3303, "seconds": 0.15}],
                              "shapes": [[256, 256, 64]], "seeds": [7], "sm_count": 4, "warp_order_seed": 0,
                              "checks_on": ["memory bounds and alignment", "shared-memory races"]}
        r["kernels"].append(k)
    # the prediction stage's section with its bottleneck charts (porter.report.prediction)
    from porter.descriptor.arch import load_arch
    from porter.kernels.knobs import spec_with_knobs
    from porter.timing import predict

    hop = load_arch("hopper")
    specs = [spec_with_knobs(hop, name, {}) for name in ("gemm.bf16", "gemm.fp8")]
    r["prediction"] = {"label": "predicted by porter's timing model, not measured", "products": ["H100 SXM"],
                       "missing": [], "rows": [predict(hop, s, product="H100 SXM").to_dict() for s in specs]}
    r["summary"]["highest_level"] = Level.EMULATED.label   # the badge issue 20 found blank
    r["summary"]["levels"] = {lvl.label: 1 for lvl in Level}
    return root, r


@pytest.fixture(scope="module")
def page(report):
    """(probe results, pixel results, console lines) for the report page in Chromium."""
    root, r = report
    html = render_html(r)
    page_file = root / "report.html"
    page_file.write_text(html)
    probe_file = root / "probe.html"
    probe_file.write_text(html.replace("<head>", "<head>" + _PROBE, 1)
                          .replace("</body>", "<script>window.__porterProbe()</script></body>", 1))
    done = _chromium([f"--window-size={WIDTH},1000", "--dump-dom", probe_file.as_uri()], root / "p1")
    probe = _dumped_json(done.stdout, "porter-probe")
    # The page as a reader gets it (no probe), whole: a window as tall as the page.
    height = min(max(probe["height"], 400), 16000)
    png = root / "report.png"
    shot = _chromium([f"--window-size={WIDTH},{height}", f"--screenshot={png}", page_file.as_uri()], root / "p2")
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", shot.stderr[-2000:]
    sampler = root / "pixels.html"
    sampler.write_text(_SAMPLER % (json.dumps(probe["badges"]), base64.b64encode(png.read_bytes()).decode()))
    read = _chromium(["--window-size=400,400", "--dump-dom", sampler.as_uri()], root / "p3")
    pixels = _dumped_json(read.stdout, "porter-pixels")
    console = _console_lines(done.stderr) + _console_lines(shot.stderr)
    return probe, pixels, console, height


def test_every_level_badge_is_drawn_and_readable(page):
    probe, pixels, _, height = page
    assert (pixels["width"], pixels["height"]) == (WIDTH, height)
    labels = {b["text"] for b in pixels["badges"]}
    assert {lvl.label for lvl in Level} <= labels           # every level, the summary's too
    for b in pixels["badges"]:
        assert b["contrast"] >= AA_NORMAL_TEXT, (
            f"badge {b['text']!r}: text {b['text_colour']} on {b['background']} has contrast "
            f"{b['contrast']:.2f}, below {AA_NORMAL_TEXT}")


def test_chart_labels_are_inside_their_charts(page):
    probe = page[0]
    assert probe["texts"] > 10                               # the DAG, resource bars and numerics charts
    assert probe["cut"] == [], f"chart labels cut by their SVG: {probe['cut'][:3]}"
    assert probe["width"] <= WIDTH                           # nothing runs off the page sideways


def test_page_logs_nothing_to_the_console(page):
    probe, _, console, _ = page
    assert probe["errors"] == [] and console == [], (probe["errors"], console)


def test_emulation_section_is_on_the_page(report, page):
    _, r = report
    html = render_html(r)
    assert "Emulation (executed in porter&#x27;s PTX simulator, not on a GPU)" in html
    assert "256x256x64" in html and "3,303" in html


def test_prediction_section_and_its_bottleneck_charts_are_on_the_page(report, page):
    _, r = report
    html = render_html(r)
    assert "Predicted speed (predicted by porter&#x27;s timing model, not measured)" in html
    assert html.count("aria-label=\"H100 SXM, 8192x8192x8192: predicted by porter&#x27;s timing model") == 2
