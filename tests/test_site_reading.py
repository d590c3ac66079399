"""The site as a reader meets it: the long-run bench in a section of its own (never a scenario board with
unknown facts, never counted or ranked in the headline), a map's verdict with the statistics, at a 1,400 px
window no table clipped (the summary's shaded cell and the maps' p and Holm columns in view), and the first
screen the answer: at 1,400 x 900 and at 390 x 844 the finding's lines and the "who wins where" matrix above the
fold (at 1,400 the top of the summary table too), no text wider than the window (tables scroll in their box), the
statistics one click away; screenshots of both in the test's folder."""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from test_leaderboard_site import DevTools, chromium

REPO = Path(__file__).resolve().parents[1]
BOARDS = REPO / "leaderboards"


def _stability_files(folder: Path) -> None:
    """The long-run bench's files as bench/stability.py writes them, small."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stability.md").write_text(
        "# Stability: two recipes over 1,000 updates\n\nLong runs of `sao` and `grpo` on style-drift. Made with\n\n"
        "```bash\npython bench/stability.py\n```\n\n"
        "![training reward and entropy over learner updates](stability-style-drift.png)\n\n"
        "The table: [stability-style-drift-table.md](stability-style-drift-table.md).\n")
    (folder / "stability-style-drift-table.md").write_text(
        "| | sao (2 seeds) | grpo (2 seeds) |\n|---|---:|---:|\n| learner updates | 1,294 ± 60 | 1,263 ± 76 |\n")
    (folder / "stability-style-drift.csv").write_text(
        "agent,seed,run_dir,updates,online_reward,auc\nsao,0,r/a,1284,0.58,0.59\nsao,1,r/b,1277,0.55,0.55\n"
        "grpo,0,r/c,1257,0.33,0.35\ngrpo,1,r/d,1236,0.52,0.55\n")
    Image.new("RGB", (400, 300), "white").save(folder / "stability-style-drift.png")


def test_the_stability_bench_is_its_own_section_not_a_board(tmp_path):
    from sao_env.leaderboard.site import read_boards, write_site

    _stability_files(tmp_path)
    assert read_boards(tmp_path) == []
    page = write_site(tmp_path, generator="test").read_text()
    assert 'data-scenario="stability' not in page and '<th class="num" data-key="stability' not in page
    section = page[page.index('<section id="stability">'):]
    section = section[:section.index("</section>")]
    assert "Stability: two recipes over 1,000 updates" in section
    assert "Long runs of <code>sao</code> and <code>grpo</code> on style-drift." in section
    assert "Made with" not in section  # the sentence that leads to a code block is left to the page
    assert "<dt>runs</dt><dd>4 (sao: seeds 0, 1; grpo: seeds 0, 1)" in section
    assert "<dt>learner updates</dt><dd>1,236–1,284 a run</dd>" in section
    assert "Training reward and entropy over learner updates (stability.md)." in section
    assert "Held-out accuracy" not in section and "?" not in section.replace('<a href="#', "")
    assert '<td class="num" data-sort="1,294 ± 60">1,294 ± 60</td>' in section
    assert '<a href="#stability">stability</a>' in page


def test_a_maps_verdict_is_read_under_the_headline(tmp_path):
    from sao_env.leaderboard.site import map_findings, write_site

    where = tmp_path / "mymap"
    where.mkdir(parents=True)
    (where / "grid.json").write_text(json.dumps({"title": "My map", "baseline": "a", "metric": "online_reward",
                                                 "rows": [], "scenarios": []}))
    (where / "README.md").write_text("# My map\n\nWhat it asks.\n\n## Verdict (n = 5)\n\n**A beats `b` when it rains.** "
                                     "See [the table](style-drift.md).\n\n| x | y |\n")
    assert map_findings(tmp_path) == [("mymap", "My map", "**A beats `b` when it rains.** See [the table](style-drift.md).")]
    page = write_site(tmp_path, generator="test").read_text()
    statistics = page[page.index('<details id="statistics"'):]
    statistics = statistics[:statistics.index("</details>")]
    assert ('<p class="lead finding" id="finding-mymap"><b><a href="#map-mymap">My map</a>.</b> <b>A beats '
            '<code>b</code> when it rains.</b> See <a href="style-drift.md">the table</a>.</p>') in statistics


def _open(path: Path, width: int, tmp_path: Path, height: int = 900, *, browser: DevTools | None = None):
    """A tab of ``width`` x ``height`` CSS px (a phone's, touch and its viewport meta, under 500 px) on
    ``path``; a new browser unless one is given. Returns the browser and ``evaluate(expression)``; the tab's
    ``screenshot(path)`` writes a PNG of what the window shows."""
    browser = browser or DevTools(chromium(), tempfile.mkdtemp(dir=tmp_path))
    target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime"):
        browser.call(f"{domain}.enable", session=session)
    browser.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                        "mobile": width < 500}, session)
    browser.call("Page.navigate", {"url": path.as_uri()}, session)

    def evaluate(expression: str):
        return browser.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                 "awaitPromise": True}, session)["result"].get("value")

    def screenshot(out: Path) -> Path:
        out.write_bytes(base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png"}, session)["data"]))
        return out

    evaluate("new Promise(r => document.readyState === 'complete' ? r(1) : addEventListener('load', () => r(1)))")
    evaluate.screenshot = screenshot
    return browser, evaluate


CLIPPED_JS = """JSON.stringify(Array.from(document.querySelectorAll('.wrap')).filter(w => w.scrollWidth > w.clientWidth + 1)
  .map(w => w.querySelector('table').id))"""
SHADED_JS = """JSON.stringify(Array.from(document.querySelectorAll('td.best')).filter(td => {
  const r = td.getBoundingClientRect(), w = td.closest('.wrap').getBoundingClientRect();
  return r.right > w.right + 1 || r.right > innerWidth}).map(td => td.closest('table').id))"""
HOLM_JS = """JSON.stringify(Array.from(document.querySelectorAll('#maps th')).filter(th => /Holm|^p /.test(th.textContent))
  .filter(th => th.getBoundingClientRect().right > th.closest('.wrap').getBoundingClientRect().right + 1)
  .map(th => th.closest('table').id + ': ' + th.textContent))"""


@pytest.fixture(scope="module")
def committed_site(tmp_path_factory) -> Path:
    """The committed boards, maps and stability bench, the site written again from them (once for this module)."""
    from sao_env.leaderboard.site import write_site

    folder = tmp_path_factory.mktemp("committed") / "leaderboards"
    shutil.copytree(BOARDS, folder, ignore=shutil.ignore_patterns("index.html"))
    return write_site(folder, generator="test")


NEEDS_CHROMIUM = pytest.mark.skipif(chromium() is None, reason="no headless Chromium here (make test installs "
                                                               "Debian's chromium-headless-shell when it runs as root)")


@pytest.mark.slow
@NEEDS_CHROMIUM
def test_the_committed_site_at_1400_px(committed_site, tmp_path):
    """The committed boards, maps and stability bench, the site written again from them."""
    page = committed_site
    browser, evaluate = _open(page, 1400, tmp_path)
    try:
        assert json.loads(evaluate(CLIPPED_JS)) == []
        assert json.loads(evaluate(SHADED_JS)) == []
        assert json.loads(evaluate(HOLM_JS)) == []
        assert evaluate("document.querySelectorAll('#summary-table td.best').length") >= 1
        scenarios = evaluate("Array.from(document.querySelectorAll('section.scenario')).map(s => s.dataset.scenario)")
        assert not [s for s in scenarios if s.startswith("stability")]
        reading = evaluate("document.getElementById('reading').textContent")
        assert reading.startswith(f"On the {len(scenarios)} scenarios at full budget")
        stability = evaluate("document.getElementById('stability').innerText")
        assert "?" not in stability.replace("? (", "") and "simulated hours. Line" not in stability
        assert "over learner updates" in stability
        # the maps' verdicts are read with the statistics, one click away
        assert evaluate("!!document.querySelector('details#statistics #finding-regimes')") is True
    finally:
        browser.close()


FIRST_SCREEN_JS = """JSON.stringify((() => {
  const box = el => { const r = el.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, right: r.right} };
  const outside = Array.from(document.querySelectorAll('body *')).filter(el => !el.closest('.wrap') &&
    !el.closest('details:not([open])') && el.getBoundingClientRect().right > innerWidth + 1);
  return {width: innerWidth, height: innerHeight, scrollWidth: document.documentElement.scrollWidth,
    findings: box(document.getElementById('findings')), lines: document.querySelectorAll('#findings li').length,
    matrix: box(document.getElementById('matrix-table')),
    firstRow: box(document.querySelector('#matrix-table tbody tr')),
    summary: box(document.getElementById('summary-table')),
    wider: outside.map(el => el.tagName + (el.id ? '#' + el.id : '') + '.' + el.className),
    boxes: Array.from(document.querySelectorAll('.wrap')).map(w => getComputedStyle(w).overflowX),
    readingShown: document.getElementById('reading').checkVisibility(),
    readingInText: document.body.innerText.includes(document.getElementById('reading').textContent.slice(0, 40)),
    header: document.querySelector('header').innerText}
})())"""


@pytest.mark.slow
@NEEDS_CHROMIUM
def test_the_first_screen_is_the_finding_at_1400_and_390_px(committed_site, tmp_path):
    """At 1,400 x 900 the lines, the whole matrix and the top of the summary table; at 390 x 844 the lines and
    the matrix's first rows; no text wider than the window, every table in a box that scrolls; the statistics
    behind a click; screenshots of both first screens in this test's folder."""
    from PIL import Image

    from sao_env.leaderboard.site import KEYS_WORDS

    browser = None
    try:
        for width, height in ((1400, 900), (390, 844)):
            browser, evaluate = _open(committed_site, width, tmp_path, height, browser=browser)
            shot = evaluate.screenshot(tmp_path / f"first-screen-{width}x{height}.png")
            seen = json.loads(evaluate(FIRST_SCREEN_JS))
            assert seen["width"] == width and seen["scrollWidth"] <= width, seen
            assert seen["wider"] == [] and set(seen["boxes"]) == {"auto"}, seen
            assert seen["lines"] == 3 and 0 <= seen["findings"]["top"] and seen["findings"]["bottom"] <= height, seen
            assert seen["findings"]["bottom"] <= seen["matrix"]["top"] < seen["summary"]["top"], seen
            assert seen["firstRow"]["bottom"] <= height, seen
            if width == 1400:
                assert seen["matrix"]["bottom"] <= height and seen["summary"]["top"] + 60 <= height, seen
            assert "Code keys: runs made by code" in seen["header"] and "page written by code" in seen["header"]
            assert " ".join(KEYS_WORDS.replace("<code>", "").replace("</code>", "").split()) in " ".join(
                seen["header"].split())
            assert seen["readingShown"] is False and seen["readingInText"] is False  # behind their summary line
            image = Image.open(shot).convert("RGB")
            assert image.size == (width, height)
            assert len(image.getcolors(maxcolors=1 << 20) or []) > 50  # text and shaded cells, not a blank page
        evaluate("document.querySelector('#statistics > summary').click()")
        assert evaluate("document.getElementById('reading').checkVisibility()") is True
    finally:
        if browser is not None:
            browser.close()
