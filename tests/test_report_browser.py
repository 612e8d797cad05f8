"""The interactive HTML report as a real browser runs it: headless Chromium driven by
Selenium hovers ops, zooms, pans, sorts and resizes, and every number it shows is
checked against the timeline the library simulates here.

Needs Debian's ``chromium`` and ``chromium-driver`` and the ``selenium`` package (the
test extra). ``.ci/run`` installs them and sets PIPESIM_REQUIRE_BROWSER, so that CI
fails rather than skips when one is missing."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from pipesim import Costs, build, simulate, summarize
from pipesim.cli import main
from pipesim.components import PRESETS, ComponentCosts
from pipesim.ir import Pair
from pipesim.render.palette import fill

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
except ImportError:  # pragma: no cover - the test extra has it
    webdriver = None
MISSING = [what for what, ok in (("chromium", BROWSER), ("chromium-driver", DRIVER), ("selenium", webdriver)) if not ok]
if MISSING and os.environ.get("PIPESIM_REQUIRE_BROWSER"):
    raise RuntimeError(
        f"PIPESIM_REQUIRE_BROWSER is set but {', '.join(MISSING)} is missing (apt-get install chromium chromium-driver)"
    )
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"{', '.join(MISSING)} not installed (apt-get install chromium chromium-driver)"
)

SCHEDULES = ("1f1b", "zb-h1", "dualpipe")
# uneven per-stage costs and a latency: durations and waits differ op to op
COST_FLAGS = ["--f", "1,1.25,1.5,1", "--b", "1", "--w", "0.5", "--comm", "0.25"]
COSTS = Costs(f=(1, 1.25, 1.5, 1), b=1, w=0.5, comm=0.25)
WIDTH = 1366


def g(x: float) -> str:
    return f"{x:.6g}"


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    o = webdriver.ChromeOptions()
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path_factory.mktemp('profile')}",
        f"--window-size={WIDTH},900",
    ):
        o.add_argument(flag)
    o.binary_location = BROWSER
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(DRIVER), options=o)
    d.set_window_size(WIDTH, 900)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    argv = ["report", "--pp", "4", "-m", "8", "--schedules", ",".join(SCHEDULES), *COST_FLAGS]
    assert main([*argv, "--sweep", "8:64", "-o", str(d / "r.html")]) == 0
    assert (
        main(["report", "--pp", "4", "-m", "8", "--schedules", "1f1b,dualpipe", "--preset", "ep-1to1", "-o", str(d / "c.html")])
        == 0
    )
    assert main(["report", "--pp", "8", "-m", "64", "--schedules", "1f1b,dualpipe,dualpipev", "-o", str(d / "big.html")]) == 0
    return {k: (d / f"{k}.html").resolve().as_uri() for k in ("r", "c", "big")}


def load(driver, url):
    driver.get(url)
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []


def flat(tl):
    """The timeline's items in the report's order: rank by rank."""
    return [e for evs in tl.events for e in evs]


def hover(driver, schedule_index: int, item: int) -> dict[str, str]:
    rect = driver.find_element(By.CSS_SELECTOR, f'rect.op[data-s="{schedule_index}"][data-e="{item}"]')
    ActionChains(driver).move_to_element(rect).perform()
    tip = driver.find_element(By.ID, "tip")
    assert tip.is_displayed()
    rows = {r.get_attribute("data-k"): r.find_element(By.TAG_NAME, "td").text for r in tip.find_elements(By.TAG_NAME, "tr")}
    rows["head"] = tip.find_element(By.CLASS_NAME, "tiphead").text
    return rows


def test_hover_shows_what_an_op_is_and_what_it_waited_for(driver, pages):
    load(driver, pages["r"])
    s = build("dualpipe", 4, 8)
    tl = simulate(s, COSTS)
    events = flat(tl)
    checked = 0
    for i, e in enumerate(events):
        if isinstance(e.item, Pair) or e.rank not in (1, 2) or i % 3:
            continue
        rows = hover(driver, 2, i)
        op = e.item
        assert rows["head"] == f"dualpipe: {op}"
        assert rows["rank"] == str(e.rank)
        assert (rows["start"], rows["end"], rows["duration"]) == (g(e.start), g(e.end), g(e.duration))
        assert rows["micro-batch"] == str(op.mb) and rows["stage"] == str(s.placement.stage_of(e.rank, op.chunk, op.mb))
        assert rows["kind"].startswith(op.kind + ": ")
        direction = "forward direction" if op.chunk == 0 else "reverse direction"
        assert rows["chunk"].startswith(f"{op.chunk}: {direction}")
        # what set the start: a transfer arriving just then, or the rank's previous item
        arrivals = [t for t in tl.transfers if t.dst == e.rank and abs(t.end - e.start) < 1e-9]
        for t in arrivals:
            assert f"on rank {t.src}, ready at {g(t.end)} (set the start)" in rows["waited for"]
        before = [p for p in tl.events[e.rank] if p.end <= e.start + 1e-9]
        if not arrivals:
            assert before and abs(before[-1].end - e.start) < 1e-9
            assert f"its rank, busy with {before[-1].item} until {g(e.start)}" in rows["waited for"]
        checked += 1
    assert checked >= 6


def test_hover_on_a_pair_shows_both_ops_and_its_two_streams(driver, pages):
    load(driver, pages["c"])
    s = build("dualpipe", 4, 8)
    tl = simulate(s, ComponentCosts.uniform(PRESETS["ep-1to1"], 1))
    events = flat(tl)
    i, e = next((i, e) for i, e in enumerate(events) if isinstance(e.item, Pair))
    rows = hover(driver, 1, i)
    assert rows["head"] == f"dualpipe: {e.item} (overlapped pair)"
    assert rows["forward micro-batch"] == str(e.item.forward.mb) and rows["backward micro-batch"] == str(e.item.backward.mb)
    assert rows["backward kind"].startswith(e.item.backward.kind + ": ")
    for stream in ("compute", "comm"):
        want = "; ".join(f"{g_.label} {g(g_.start)}–{g(g_.end)}" for g_ in e.segments if g_.stream == stream)
        assert rows[f"{stream} stream"] == want


def test_a_pair_without_component_costs_says_its_streams_are_not_modelled(driver, pages):
    load(driver, pages["r"])
    tl = simulate(build("dualpipe", 4, 8), COSTS)
    i, e = next((i, e) for i, e in enumerate(flat(tl)) if isinstance(e.item, Pair))
    rows = hover(driver, 2, i)
    assert rows["head"] == f"dualpipe: {e.item} (overlapped pair)" and "do not see inside a pair" in rows["streams"]
    assert (rows["start"], rows["end"]) == (g(e.start), g(e.end))


def visible(driver) -> tuple[float, float]:
    return tuple(driver.execute_script("var v = window.pipesimReport.view; return [v.t0, v.t1];"))


def test_zoom_and_pan_change_the_visible_time_range_of_every_timeline(driver, pages):
    load(driver, pages["r"])
    span = max(summarize(build(n, 4, 8), simulate(build(n, 4, 8), COSTS)).makespan for n in SCHEDULES)
    assert visible(driver) == pytest.approx((0, span))
    assert driver.find_element(By.ID, "range").text == f"showing t = 0 to {g(span)} of 0 to {g(span)}"
    # an op of 1F1B in the middle of the step, which stays in view when zooming in on the middle
    events = flat(simulate(build("1f1b", 4, 8), COSTS))
    mid = next(i for i, e in enumerate(events) if 0.3 * span < e.start and e.end < 0.6 * span)
    op = f'rect.op[data-s="0"][data-e="{mid}"]'
    w0 = float(driver.find_element(By.CSS_SELECTOR, op).get_attribute("width"))
    driver.find_element(By.ID, "zoom-in").click()
    assert visible(driver) == pytest.approx((span / 4, 3 * span / 4))
    assert driver.find_element(By.ID, "range").text == f"showing t = {g(span / 4)} to {g(3 * span / 4)} of 0 to {g(span)}"
    # every panel redrawn at the new scale: an op is twice as wide
    assert float(driver.find_element(By.CSS_SELECTOR, op).get_attribute("width")) == pytest.approx(2 * w0, rel=1e-3)
    # the tick labels now cover the zoomed range only
    ticks = [float(t.text) for t in driver.find_elements(By.CSS_SELECTOR, "#panel-1 svg.timeline .axis text")]
    assert ticks and span / 4 <= min(ticks) and max(ticks) <= 3 * span / 4
    # the wheel zooms in around the pointer; a drag pans
    svg = driver.find_element(By.CSS_SELECTOR, "#panel-0 svg.timeline")
    ActionChains(driver).scroll_from_origin(ScrollOrigin.from_element(svg), 0, -100).perform()
    t0, t1 = visible(driver)
    assert t1 - t0 == pytest.approx(0.8 * span / 2)
    ActionChains(driver).move_to_element(svg).click_and_hold().move_by_offset(-200, 0).release().perform()
    p0, p1 = visible(driver)
    assert p1 - p0 == pytest.approx(t1 - t0) and p0 > t0
    driver.find_element(By.ID, "reset").click()
    assert visible(driver) == pytest.approx((0, span))


def test_the_table_sorts_by_any_column(driver, pages):
    load(driver, pages["r"])
    bubble = {n: summarize(build(n, 4, 8), simulate(build(n, 4, 8), COSTS)).bubble_ratio for n in SCHEDULES}

    def names():
        return [r.find_element(By.TAG_NAME, "td").text for r in driver.find_elements(By.CSS_SELECTOR, "#comparison tbody tr")]

    assert names() == list(SCHEDULES)
    header = next(th for th in driver.find_elements(By.CSS_SELECTOR, "#comparison th") if th.text == "bubble")
    header.click()
    assert names() == sorted(SCHEDULES, key=bubble.get)
    header = next(th for th in driver.find_elements(By.CSS_SELECTOR, "#comparison th") if th.text.startswith("bubble"))
    header.click()
    assert names() == sorted(SCHEDULES, key=bubble.get, reverse=True)


def test_stacked_or_one_at_a_time(driver, pages):
    load(driver, pages["r"])
    panels = driver.find_elements(By.CSS_SELECTOR, "#timelines .panel")
    assert [p.is_displayed() for p in panels] == [True, True, True]
    Select(driver.find_element(By.ID, "show")).select_by_visible_text("dualpipe")
    assert [p.is_displayed() for p in panels] == [False, False, True]
    Select(driver.find_element(By.ID, "show")).select_by_visible_text("all, stacked")
    assert all(p.is_displayed() for p in panels)


def test_a_1366_px_window_shows_whole_timelines_without_scrolling_sideways(driver, pages):
    load(driver, pages["big"])
    assert driver.execute_script("return document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    inner = driver.execute_script("return window.innerWidth")
    for n, name in enumerate(("1f1b", "dualpipe", "dualpipev")):
        svg = driver.find_element(By.CSS_SELECTOR, f"#panel-{n} svg.timeline")
        box = svg.rect
        assert box["x"] >= 0 and box["x"] + box["width"] <= inner
        tl = simulate(build(name, 8, 64))
        last = len(flat(tl)) - 1 - next(i for i, e in enumerate(reversed(flat(tl))) if e.end == tl.end)
        end = driver.find_element(By.CSS_SELECTOR, f'rect.op[data-s="{n}"][data-e="{last}"]').rect
        assert end["x"] + end["width"] <= box["x"] + box["width"] + 0.5  # the step's last op is on screen


def test_memory_curves_and_the_sweep(driver, pages):
    load(driver, pages["r"])
    assert len(driver.find_elements(By.CSS_SELECTOR, "#panel-2 svg.memory path.mem")) == 4
    lines = driver.find_elements(By.CSS_SELECTOR, "#sweep-bubble path[data-series]")
    assert [p.get_attribute("data-series") for p in lines] == list(SCHEDULES)
    for chart in ("bubble", "memory"):
        boxes = driver.execute_script(
            f"return Array.from(document.querySelectorAll('#sweep-{chart} .end-label')).map(function (t) "
            "{ var b = t.getBBox(); return [b.x, b.y, b.x + b.width, b.y + b.height]; });"
        )
        assert len(boxes) == 3
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)


def test_screenshot_shows_the_charts_colours(driver, pages, tmp_path):
    load(driver, pages["r"])
    png = tmp_path / "shot.png"
    driver.save_screenshot(str(png))
    import matplotlib.image

    img = matplotlib.image.imread(png)[..., :3]

    def pixels_of(colour: str) -> int:
        rgb = np.array([int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
        return int((np.abs(img - rgb).max(axis=2) < 0.03).sum())

    # the first timeline (1F1B) is on screen: its forward and backward boxes are painted
    assert pixels_of(fill("F", 0)) > 500 and pixels_of(fill("BW", 0)) > 500
