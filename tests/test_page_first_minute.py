"""A newcomer's first minute on the page: Compare in the first screen, a comparison that shows where it
is while it runs, ratios that never read "faster than possible" without saying why, bars whose colours
mean one thing each, labels that fit, and after Compare each mode's own summary beside its timeline, each
mode set against the process pool, a warning where the host was busy. Races are real; the tests pass
their events on in steps (tests/page_visit.py's HeldRaces), so that "while it runs" is a state the test
holds, not a moment it hopes to catch."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from lab import ROOT
from tests.lab_server import LabServer
from tests.page_visit import (
    BROWSER_TEST_TIMEOUT_S,
    DESKTOP,
    PHONE,
    RACE_TIMEOUT_MS,
    HeldRaces,
    Visit,
    assert_labels_fit,
    chromium,
    is_event,
    load,
    visiting,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(BROWSER_TEST_TIMEOUT_S)]

MODES = ["blocking", "threading", "processing", "distributed", "async"]  # those this server runs, in its order
SCREENSHOTS = ROOT / "test-artifacts" / "page"
SLEEP = {"seconds": "0.05"}  # small: every mode's race takes well under a second


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    folder: Path = tmp_path_factory.mktemp("first-minute")
    with LabServer(["--process-pool", "2", "--thread-pool", "4", "--dask-workers", "2", "--no-access-log"],
                   folder / "server.log") as server:  # fmt: skip
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture(params=[DESKTOP, PHONE], ids=["1366x768", "390x844"])
def visit(lab: LabServer, browser: Browser, request: pytest.FixtureRequest) -> Iterator[Visit]:
    with visiting(browser, lab.url, request.param) as seen:
        yield seen


@pytest.fixture
def desktop(lab: LabServer, browser: Browser) -> Iterator[Visit]:
    with visiting(browser, lab.url, DESKTOP) as seen:
        yield seen


def in_first_screen(page: Page, selector: str) -> None:
    box = page.locator(selector).bounding_box()
    size = page.viewport_size
    assert box is not None and size is not None
    assert box["y"] >= 0 and box["y"] + box["height"] <= size["height"], (selector, box, size)
    assert box["x"] >= 0 and box["x"] + box["width"] <= size["width"], (selector, box, size)


def test_compare_and_what_to_press_first_are_in_the_first_screen(visit: Visit) -> None:
    page = load(visit)
    assert page.evaluate("window.scrollY") == 0
    in_first_screen(page, "#compare")
    expect(page.get_by_role("button", name="Compare all modes")).to_be_visible()
    # The prompt that names it, where the eye lands: the results' status beside the form, or the header above it.
    prompts = page.locator("#status:visible, .top .first-step:visible").filter(has_text="Compare all modes")
    expect(prompts).not_to_have_count(0)
    in_first_screen(page, "#status:visible, .top .first-step:visible >> nth=0")
    # Each mode one line until asked, read whole (no ellipsis: the line is as wide as its text needs); a mode this
    # Python cannot run says so on its line.
    summaries = page.locator("#mode-notes summary")
    expect(summaries).to_have_count(len(page.locator("#mode option").all()))
    line = float(page.eval_on_selector("#mode-notes summary", "s => parseFloat(getComputedStyle(s).lineHeight)"))
    for i in range(summaries.count()):
        box = summaries.nth(i).bounding_box()
        assert box is not None and box["height"] < 1.5 * line, (summaries.nth(i).text_content(), box, line)
        fits = summaries.nth(i).evaluate("s => s.scrollWidth <= s.clientWidth")
        assert fits, summaries.nth(i).text_content()
    first = page.locator("#mode-notes details").first
    first.locator("summary").click()  # asked: the whole description
    opened = first.bounding_box()
    assert opened is not None and opened["height"] > 1.5 * line
    assert page.get_by_label("Mode").count() == 1  # the mode control, and nothing else named like it
    visit.assert_clean()


def ratios_below_one_are_explained(page: Page) -> int:
    """Every ratio in sight that reads below 1 points to a visible sentence saying why; how many there were
    (a compared race's card holds its ratios in its folded summary until opened)."""
    ratios = page.locator(".ratio[data-ratio]:visible")
    below = 0
    for i in range(ratios.count()):
        ratio = ratios.nth(i)
        if round(float(ratio.get_attribute("data-ratio") or "nan"), 2) >= 1:
            continue
        below += 1
        note = ratio.get_attribute("aria-describedby")
        assert note, f"{ratio.text_content()} has no note"
        expect(page.locator(f"#{note}")).to_be_visible()
        expect(page.locator(f"#{note}")).to_contain_text("Below 1")
    return below


def slow_t(event: dict[str, Any]) -> None:
    """t timed on a slow moment: the ratio to it below 1 (blocking), as on a host whose speed moves (issue 33)."""
    if event["event"] == "done" and event["summary"]["mode"] in ("blocking", "async"):
        event["summary"]["ratio"] = 0.72


def test_a_comparison_names_each_mode_and_draws_it_while_it_runs(desktop: Visit) -> None:
    page = load(desktop)
    races = HeldRaces(page, edit=slow_t)
    page.select_option("#mode", "async")
    page.fill("#param-delay", "0.05")
    page.select_option("#mode", "blocking")
    page.select_option("#workload", "sleep")
    page.fill("#param-seconds", SLEEP["seconds"])
    page.fill("#concurrency", "3")
    page.click("#compare")
    rows = page.locator("#compare-table tbody tr")
    for number, mode in enumerate(MODES):
        held = races.next(page, number)
        held.release(page, is_event("start"))
        expect(page.locator("#status")).to_contain_text(f"Comparing all modes, {number + 1} of {len(MODES)}. {mode}: ")
        expect(page.locator("#status")).to_contain_text("timing one request alone")
        if mode != "async":  # (the page warms up a mode that runs a workload; async's only awaits its upstream)
            # The server seen at work from its first answer on: each warm-up request drawn as it ends, before t.
            held.release(page, is_event("warmup"))
            expect(page.locator("#timeline .solo rect.warmup")).to_have_count(1)
            expect(page.locator("#status")).to_contain_text("warming the server up (1 request answered")
        expect(page.locator("#mode")).to_have_value(mode)  # the selector and its highlight follow the race
        expect(page.locator("#mode-notes li.selected")).to_have_attribute("data-mode", mode)
        states = [rows.nth(i).get_attribute("data-state") for i in range(rows.count())]
        assert states == ["done"] * number + ["running"] + ["pending"] * (len(MODES) - number - 1), states
        held.release(page, is_event("response"))  # the first answer of this mode's race
        expect(page.locator("#status")).to_contain_text(f"{mode}: racing, 1 of 3 answered")
        expect(rows.nth(number).locator(".step")).to_have_text("racing, 1 of 3 answered")
        # Drawn before its race ends, let alone the comparison.
        expect(page.locator("#timeline .request-bar")).to_have_count(1)
        assert page.locator("#comparison[data-complete]").count() == 0
        held.release(page)
        expect(rows.nth(number)).to_have_attribute("data-state", "done")
    expect(page.locator("#comparison")).to_have_attribute("data-complete", "true", timeout=RACE_TIMEOUT_MS)
    assert [rows.nth(i).get_attribute("data-mode") for i in range(rows.count())] == MODES
    expect(page.locator("#thumbnails svg")).to_have_count(len(MODES))
    # blocking's row and async's summary read 0.72 against t: each with its sentence.
    assert ratios_below_one_are_explained(page) >= 3
    desktop.assert_clean()


def split_run(event: dict[str, Any]) -> None:
    """An envelope that tells its run's own wait (timing.io_wait_ms), beside computing and waiting for a core."""
    if event["event"] == "response" and event["status"] == 200:
        timing = event["body"]["timing"]
        run = timing["run_ms"]
        timing |= {"cpu_ms": 0.5 * run, "core_wait_ms": 0.2 * run, "io_wait_ms": 0.3 * run, "blocked_ms": 0.0,
                   "gil_wait_ms": 0.0}  # fmt: skip


def race_held(page: Page, races: HeldRaces, mode: str, params: dict[str, str], concurrency: int) -> None:
    page.select_option("#mode", mode)
    for name, value in params.items():
        page.fill(f"#param-{name}", value)
    page.fill("#concurrency", str(concurrency))
    number = len(races.sockets)
    page.click("#run")
    races.next(page, number).release(page)
    expect(page.locator("#summary p").first).to_be_visible(timeout=RACE_TIMEOUT_MS)
    expect(page.locator("#timeline .request-bar")).to_have_count(concurrency)


def geometry(rect: Locator) -> dict[str, float]:
    """A rect's x, width and height as drawn, in the chart's own units (no stroke, no rounding)."""
    return {name: float(rect.get_attribute(name) or "nan") for name in ("x", "width", "height")}


def test_a_runs_parts_are_layers_as_long_as_the_run(desktop: Visit) -> None:
    page = load(desktop)
    races = HeldRaces(page, edit=split_run)
    page.select_option("#workload", "count")
    race_held(page, races, "processing", {"n": "200000"}, 4)
    for i in range(4):
        bar = page.locator("#timeline .request-bar").nth(i)
        run = geometry(bar.locator(".run.started"))
        for layer, share in ((".computing", 0.5), (".core-wait", 0.2), (".own-wait", 0.3)):
            box = geometry(bar.locator(layer))
            # Over the whole run, never after it: the envelope tells the sums, not the moments.
            assert (box["x"], box["width"]) == (run["x"], run["width"]), (layer, box, run)
            # Not a measurement: split_run rewrote the envelope to exactly these shares, so a layer's height is
            # arithmetic on the drawn run's, whatever the machine's load (0.01 px: the SVG's rounding).
            assert abs(box["height"] - share * run["height"]) < 0.01, (layer, box, run)
        assert float(bar.get_attribute("data-own-wait-ms") or 0) > 0
    desktop.assert_clean()


def fill_of(page: Page, selector: str) -> str:
    return str(page.eval_on_selector(selector, "e => getComputedStyle(e).fill"))


def test_async_bars_are_drawn_as_their_own_wait_not_as_computing(desktop: Visit) -> None:
    page = load(desktop)
    races = HeldRaces(page)
    race_held(page, races, "async", {"delay": "0.1"}, 3)
    computing = fill_of(page, ".legend .sw-run")
    own = fill_of(page, ".legend .sw-own")
    assert "dots" in own and computing != own
    bars = page.locator("#timeline .request-bar")
    for i in range(bars.count()):
        bar = bars.nth(i)
        assert bar.locator(".computing").count() == 0
        wait = bar.locator(".own-wait")
        assert geometry(wait) == geometry(bar.locator(".run.started"))  # all of its run waited
        assert "dots" in str(wait.evaluate("e => getComputedStyle(e).fill"))
    desktop.assert_clean()


def far_away(event: dict[str, Any]) -> None:
    """Workers named by long addresses, as on a cluster across hosts (IPv6: longer than a label's room)."""
    if event["event"] == "response" and event["status"] == 200:
        worker = event["body"]["worker"]
        worker["address"] = f"tcp://[fd00:10:200::{worker['pid']:x}]:45678"


def test_lane_labels_fit_beside_the_bars(visit: Visit) -> None:
    page = load(visit)
    races = HeldRaces(page, edit=far_away)
    page.select_option("#workload", "sleep")
    race_held(page, races, "processing", SLEEP, 4)
    assert_labels_fit(page)
    labels = page.locator("#timeline .lane-label > text:first-of-type").all_text_contents()
    assert labels and all(label.startswith(("[fd00:", ":")) for label in labels), labels
    visit.assert_clean()


def busy_processing(event: dict[str, Any]) -> None:
    """processing's runs as on a host whose other programs had the cores, half their run time waiting for one;
    every other race's as on a quiet host (this one may really be busy)."""
    if event["event"] == "done":
        event["summary"]["core_wait_share"] = 0.5 if event["summary"]["mode"] == "processing" else 0.0


def compare_count(page: Page, races: HeldRaces) -> None:
    """Compare all modes on a short GIL-bound loop, four at once, every race's events passed on whole."""
    page.select_option("#mode", "async")
    page.fill("#param-delay", "0.1")
    page.select_option("#mode", "processing")
    page.select_option("#workload", "count")
    page.fill("#param-n", "2000000")
    page.fill("#concurrency", "4")
    page.click("#compare")
    for number in range(len(MODES)):
        races.next(page, number).release(page)
    expect(page.locator("#comparison")).to_have_attribute("data-complete", "true", timeout=RACE_TIMEOUT_MS)


def assert_nothing_clipped(page: Page) -> None:
    width = (page.viewport_size or {"width": 0})["width"]
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    for selector in ("#mode-notes summary", ".thumb-caption", ".thumb-why p"):
        items = page.locator(selector)
        for i in range(items.count()):
            assert items.nth(i).evaluate("e => e.scrollWidth <= e.clientWidth + 1"), items.nth(i).text_content()


def test_each_modes_summary_is_beside_its_timeline_after_compare(visit: Visit) -> None:
    page = load(visit)
    races = HeldRaces(page, edit=busy_processing)
    compare_count(page, races)
    cards = page.locator("#thumbnails figure.thumb")
    expect(cards).to_have_count(len(MODES))
    assert [cards.nth(i).get_attribute("data-mode") for i in range(len(MODES))] == MODES
    for i in range(len(MODES)):
        # No click needed: each card says why, and what /ping waited meanwhile.
        expect(cards.nth(i).locator(".thumb-why .part-why")).to_contain_text("Why:")
        expect(cards.nth(i).locator(".thumb-why .part-ping")).to_contain_text("/ping")
    threading = page.locator("figure.thumb[data-mode=threading]")
    expect(threading.locator(".part-why")).to_contain_text(re.compile(r"\(\d+%\) for the GIL"))  # its GIL share
    # Its caption opens the rest of its summary and puts that race back on the main charts.
    more = threading.locator("details.thumb-more")
    expect(more.locator("p").first).to_be_hidden()
    threading.locator(".thumb-caption").click()
    expect(more.locator(".part-ideal")).to_be_visible()
    expect(threading.locator(".thumb-caption")).to_have_attribute("aria-expanded", "true")
    expect(page.locator("#summary .part-headline")).to_contain_text("threading requests")
    expect(page.locator("#mode")).to_have_value("threading")
    # The table sets every mode against the process pool of the same comparison: processing itself reads 1.00.
    cell = page.locator("#compare-table tr[data-mode=processing] .vs-pool")
    expect(cell).to_have_text("1.00×")
    for mode in MODES:
        ratio = page.locator(f"#compare-table tr[data-mode={mode}] .vs-pool").get_attribute("data-ratio")
        assert ratio is not None and float(ratio) > 0, mode
    # processing's runs waited for cores half their time (crafted): said beside its result, and nowhere else.
    expect(page.locator("#compare-table tr.busy")).to_have_count(1)
    expect(page.locator("#compare-table tr[data-mode=processing] .busy-mark")).to_be_visible()
    note = page.locator("#compare-notes .busy-note")
    expect(note).to_contain_text("The host was busy during processing (50%")
    expect(note).to_contain_text("again")
    expect(page.locator("figure.thumb[data-mode=processing] .part-busy")).to_contain_text("run it again")
    expect(page.locator(".thumb-why .part-busy")).to_have_count(1)
    assert_nothing_clipped(page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    size = page.viewport_size or {"width": 0, "height": 0}
    page.screenshot(path=str(SCREENSHOTS / f"compare-{size['width']}x{size['height']}.png"), full_page=True)
    visit.assert_clean()


def page_t(page: Page) -> float:
    """t as the page's summary holds it (#summary's data-summary: the race's summary event)."""
    summary = json.loads(page.locator("#summary").get_attribute("data-summary") or "{}")
    return float(summary["solo_s"])


def test_one_request_alone_reads_no_longer_than_the_races_own_runs(visit: Visit) -> None:
    page = load(visit)

    def slow_t(event: dict[str, Any]) -> None:  # t timed on a slow moment of the host: three times the race's runs
        if event["event"] == "race":
            event["solo_s"] *= 3
        if event["event"] == "done":
            event["summary"]["solo_s"] *= 3
            event["summary"]["ideal_s"] *= 3

    races = HeldRaces(page, edit=slow_t)
    page.select_option("#mode", "blocking")
    page.select_option("#workload", "count")
    page.fill("#param-n", "2000000")
    page.fill("#concurrency", "3")
    page.click("#run")
    races.next(page, 0).release(page)
    expect(page.locator("#summary p").first).to_be_visible(timeout=RACE_TIMEOUT_MS)
    bars = page.locator("#timeline .request-bar")
    expect(bars).to_have_count(3)
    runs = [float(bars.nth(i).get_attribute("data-run-ms") or "nan") / 1000 for i in range(3)]
    t = page_t(page)
    # Drawn from the race's own records, not the slow t: no longer than its shortest run, and said so.
    alone = float(page.locator("#timeline .solo rect").first.get_attribute("data-seconds") or "nan")
    assert alone <= min(runs) + 1e-4 and alone < t
    # t beside it, "timed alone before" (narrow: "(t ...)").
    expect(page.locator("#timeline .solo text.solo-label")).to_contain_text(re.compile(r"timed alone before|\(t "))
    visit.assert_clean()
