"""The HTML report as a browser shows it: headless Chromium renders a screenshot that is
not blank and shows the charts' colours, and its DOM holds the comparison table.

Needs Debian's ``chromium`` (``.ci/run`` installs it and sets PIPESIM_REQUIRE_BROWSER,
so that CI fails rather than skips when it is missing)."""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest

from pipesim import build, simulate, summarize
from pipesim.cli import main
from pipesim.render.palette import fill

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
if BROWSER is None and os.environ.get("PIPESIM_REQUIRE_BROWSER"):
    raise RuntimeError("PIPESIM_REQUIRE_BROWSER is set but chromium is not installed (apt-get install chromium)")
pytestmark = pytest.mark.skipif(BROWSER is None, reason="chromium is not installed (apt-get install chromium)")

SCHEDULES = ("1f1b", "zb-h1", "dualpipe")


def chromium(tmp_path, url, *flags):
    argv = [
        BROWSER,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1400,1000",
        *flags,
        url,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    assert main(["report", "--pp", "4", "-m", "8", "--schedules", ",".join(SCHEDULES), "-o", str(d / "r.html")]) == 0
    return d, (d / "r.html").resolve().as_uri()


def test_screenshot_is_not_blank_and_shows_the_charts(report):
    d, url = report
    png = d / "shot.png"
    chromium(d, url, f"--screenshot={png}")
    import matplotlib.image

    img = matplotlib.image.imread(png)[..., :3]  # floats in 0..1
    assert img.shape[:2] == (1000, 1400)
    ink = (img < 0.9).any(axis=2).mean()
    assert ink > 0.03  # text, table and chart, not an empty page

    def pixels_of(colour: str) -> int:
        rgb = np.array([int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
        return int((np.abs(img - rgb).max(axis=2) < 0.03).sum())

    # the first chart (1F1B) is on screen: its forward and backward boxes are painted
    assert pixels_of(fill("F", 0)) > 500 and pixels_of(fill("BW", 0)) > 500


class Table(HTMLParser):
    """The cells of <table id="comparison">, row by row."""

    def __init__(self):
        super().__init__()
        self.rows, self.inside, self.cell = [], False, None

    def handle_starttag(self, tag, attrs):
        if tag == "table" and dict(attrs).get("id") == "comparison":
            self.inside = True
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag == "table":
            self.inside = False
        elif self.inside and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(self.cell.strip())
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def test_dom_holds_the_comparison_table(report):
    d, url = report
    dom = chromium(d, url, "--dump-dom").stdout
    t = Table()
    t.feed(dom)
    header, *rows = t.rows
    assert header[:3] == ["schedule", "makespan", "bubble"]
    assert [r[0] for r in rows] == list(SCHEDULES)
    for r in rows:
        s = build(r[0], 4, 8)
        rep = summarize(s, simulate(s))
        assert r[1] == f"{rep.makespan:.6g}" and r[2] == f"{rep.bubble_ratio:.1%}"
    assert dom.count("<svg") == len(SCHEDULES)
