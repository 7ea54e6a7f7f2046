"""A newcomer's first minute on the page: Compare in the first screen, a comparison that shows where it
is while it runs, ratios that never read "faster than possible" without saying why, bars whose colours
mean one thing each, labels that fit. Races are real; the tests pass their events on in steps
(tests/page_visit.py's HeldRaces), so that "while it runs" is a state the test holds, not a moment it hopes
to catch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

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
    # Each mode one line until asked; a mode this Python cannot run says so on its line.
    summaries = page.locator("#mode-notes summary")
    expect(summaries).to_have_count(len(page.locator("#mode option").all()))
    line = float(page.eval_on_selector("#mode-notes summary", "s => parseFloat(getComputedStyle(s).lineHeight)"))
    for i in range(summaries.count()):
        box = summaries.nth(i).bounding_box()
        assert box is not None and box["height"] < 1.5 * line, (summaries.nth(i).text_content(), box, line)
    first = summaries.first
    first.click()  # asked: the whole description
    opened = first.bounding_box()
    assert opened is not None and opened["height"] > 1.5 * line
    assert page.get_by_label("Mode").count() == 1  # the mode control, and nothing else named like it
    visit.assert_clean()


def ratios_below_one_are_explained(page: Page) -> int:
    """Every ratio on the page that reads below 1 points to a visible sentence saying why; how many there were."""
    ratios = page.locator(".ratio[data-ratio]")
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
