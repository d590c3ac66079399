"""The site as a reader meets it: the long-run bench in a section of its own (never a scenario board with
unknown facts, never counted or ranked in the headline), a map's verdict under the headline, and at a
1,400 px window no table clipped: the summary's shaded cell and the maps' p and Holm columns in view."""

from __future__ import annotations

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
    header = page[:page.index("</header>")]
    assert ('<p class="lead finding" id="finding-mymap"><b><a href="#map-mymap">My map</a>.</b> <b>A beats '
            '<code>b</code> when it rains.</b> See <a href="style-drift.md">the table</a>.</p>') in header


def _open(path: Path, width: int, tmp_path: Path):
    browser = DevTools(chromium(), tempfile.mkdtemp(dir=tmp_path))
    target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime"):
        browser.call(f"{domain}.enable", session=session)
    browser.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": 1,
                                                        "mobile": False}, session)
    browser.call("Page.navigate", {"url": path.as_uri()}, session)

    def evaluate(expression: str):
        return browser.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                 "awaitPromise": True}, session)["result"].get("value")

    evaluate("new Promise(r => document.readyState === 'complete' ? r(1) : addEventListener('load', () => r(1)))")
    return browser, evaluate


CLIPPED_JS = """JSON.stringify(Array.from(document.querySelectorAll('.wrap')).filter(w => w.scrollWidth > w.clientWidth + 1)
  .map(w => w.querySelector('table').id))"""
SHADED_JS = """JSON.stringify(Array.from(document.querySelectorAll('td.best')).filter(td => {
  const r = td.getBoundingClientRect(), w = td.closest('.wrap').getBoundingClientRect();
  return r.right > w.right + 1 || r.right > innerWidth}).map(td => td.closest('table').id))"""
HOLM_JS = """JSON.stringify(Array.from(document.querySelectorAll('#maps th')).filter(th => /Holm|^p /.test(th.textContent))
  .filter(th => th.getBoundingClientRect().right > th.closest('.wrap').getBoundingClientRect().right + 1)
  .map(th => th.closest('table').id + ': ' + th.textContent))"""


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason="no headless Chromium here (make test installs Debian's "
                                               "chromium-headless-shell when it runs as root)")
def test_the_committed_site_at_1400_px(tmp_path):
    """The committed boards, maps and stability bench, the site written again from them."""
    from sao_env.leaderboard.site import write_site

    folder = tmp_path / "leaderboards"
    shutil.copytree(BOARDS, folder, ignore=shutil.ignore_patterns("index.html"))
    page = write_site(folder, generator="test")
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
        regimes = evaluate("(() => { const p = document.getElementById('finding-regimes'); "
                           "return p ? p.getBoundingClientRect().top + scrollY : null })()")
        assert regimes is not None and regimes < 1200, regimes
    finally:
        browser.close()
