"""The pictures of the lab page the docs show, taken from the page as it is, so that they stay true.

    python -m scripts.screenshot                      # docs/img/page-mid-race.png, docs/img/time-split-threading.png
    python -m scripts.screenshot --series DIR         # and a compare at 1366x768 and at 390x844, in DIR
    python -m scripts.screenshot --quick --out DIR    # small workloads, everything in DIR (the tests')

`make pictures` runs the first. It starts a lab server of its own (port 0,
its own session) and Debian's chromium, headless, through Playwright, drives
the page as a newcomer would, and stops both however it ends. Beside each
picture, NAME.json records the words of the page's legend when it was taken
(tests/test_pictures.py compares them with static/index.html: a picture whose
legend the page no longer shows is out of date), the viewport, the scene,
when, the commit and the machine.

The pictures: page-mid-race.png, the first screen (1366x768) once Compare
all modes is racing processing, half of its requests answered;
time-split-threading.png, a threading race's timeline, tracks, legend and
summary. With --series, each viewport's compare is kept as it goes: start
(before the click), 5s (five seconds after it), mid (as above) and end, and
series.json says how long after the click the first bars appeared.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.lib.browser import launch, need_browser
from bench.lib.command import new_parser, run_command
from bench.lib.results import cpu_model
from bench.lib.servers import own_server
from lab import ROOT
from lab.machine import cpu_count

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

TOOL = "python -m scripts.screenshot"
IMG = ROOT / "docs" / "img"
DESKTOP = (1366, 768)
PHONE = (390, 844)
# The pictures the docs show, and what each is of (their alt text says it in the docs' own words).
PICTURES = {
    "page-mid-race.png": "the first screen while Compare all modes races processing, half of it answered",
    "time-split-threading.png": "a threading race of count: timeline, tracks, legend and summary",
}
WAIT_MS = 300_000  # a whole compare on a busy machine


@dataclass(frozen=True)
class Work:
    """What the page races: the form's defaults, or small workloads (--quick)."""

    count_n: str | None = None  # None: the page's default
    threading_n: str = "8000000"
    delay: str | None = None
    concurrency: str | None = None


QUICK = Work(count_n="2000000", threading_n="2000000", delay="0.2", concurrency="4")


def sidecar(page: Page, picture: Path, scene: str) -> None:
    """NAME.json beside the picture: the legend's words as the page showed them, and how it was taken."""
    legend = [" ".join(text.split()) for text in page.locator(".legend li").all_inner_texts()]
    size = page.viewport_size or {"width": 0, "height": 0}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout.strip()  # fmt: skip
    facts = {
        "picture": picture.name,
        "scene": scene,
        "legend": legend,
        "legend_note": " ".join(page.locator(".legend-note").inner_text().split()),
        "viewport": [size["width"], size["height"]],
        "taken": time.strftime("%Y-%m-%d %H:%M %Z"),
        "commit": commit or None,
        "machine": {"cores": cpu_count(), "cpu_model": cpu_model(), "python": sys.version.split()[0]},
    }
    picture.with_suffix(".json").write_text(json.dumps(facts, indent=1) + "\n")


def shoot(page: Page, picture: Path, scene: str, *, full_page: bool = False) -> None:
    page.screenshot(path=str(picture), full_page=full_page)
    sidecar(page, picture, scene)
    print(f"wrote {picture}", file=sys.stderr)


def fill(page: Page, work: Work) -> None:
    """The form as a newcomer leaves it (work's values where --quick gives some)."""
    if work.delay is not None:
        page.select_option("#mode", "async")
        page.fill("#param-delay", work.delay)
    page.select_option("#mode", "blocking")
    page.select_option("#workload", "count")
    if work.count_n is not None:
        page.fill("#param-n", work.count_n)
    if work.concurrency is not None:
        page.fill("#concurrency", work.concurrency)


def compare(page: Page, work: Work, out: Path | None, readme: Path | None, name: str) -> dict[str, Any]:
    """Press Compare all modes and follow it: the series' pictures in `out` (if any), the README's at mid-race.

    Returns when (seconds after the click) the first bar of the "alone" row (a warm-up request's, then t) and
    the first request's bar were drawn.
    """
    seen: dict[str, Any] = {"viewport": name}
    if out is not None:
        shoot(page, out / f"{name}-start.png", "before pressing Compare all modes")
    page.get_by_role("button", name="Compare all modes").click()  # no scrolling first: it must be in sight
    clicked = time.monotonic()
    first = {"solo_bar_s": "#timeline .solo rect", "request_bar_s": "#timeline .request-bar"}
    five_s = None if out is None else out / f"{name}-5s.png"
    while not all(key in seen for key in first):
        for key, selector in first.items():
            if key not in seen and page.locator(selector).count():
                seen[key] = round(time.monotonic() - clicked, 2)
        if five_s is not None and time.monotonic() - clicked >= 5:
            shoot(page, five_s, "five seconds after pressing Compare all modes")
            five_s = None
        page.wait_for_timeout(100)
        if time.monotonic() - clicked > WAIT_MS / 1000:
            raise RuntimeError("no bar was drawn: is the server answering?")
    if five_s is not None:
        page.wait_for_timeout(max(0, 5000 - 1000 * (time.monotonic() - clicked)))
        shoot(page, five_s, "five seconds after pressing Compare all modes")
    mid_race(page, work, out, readme, name)
    page.wait_for_selector("#comparison[data-complete=true]", timeout=WAIT_MS)
    seen["compare_s"] = round(time.monotonic() - clicked, 1)
    if out is not None:
        page.evaluate("window.scrollTo(0, 0)")
        shoot(page, out / f"{name}-end.png", "the compare over, the first screen")
        page.locator("#timelines").scroll_into_view_if_needed()
        shoot(page, out / f"{name}-end-timelines.png", "the compare over, its timelines")
    return seen


def mid_race(page: Page, work: Work, out: Path | None, readme: Path | None, name: str) -> None:
    """Processing racing, half of its requests answered: the series' "mid" and the README's picture."""
    page.wait_for_selector("#compare-table tr[data-mode=processing][data-state=running]", timeout=WAIT_MS)
    half = int(work.concurrency or 10) // 2
    page.wait_for_selector(f"#timeline .request-bar >> nth={half - 1}", timeout=WAIT_MS)
    scene = "Compare all modes racing processing, half of its requests answered"
    if out is not None:
        shoot(page, out / f"{name}-mid.png", scene)
    if readme is not None:
        shoot(page, readme, scene)


def threading_race(page: Page, work: Work, picture: Path) -> None:
    """A threading race of count, then its results from the timeline to the end of the summary."""
    page.select_option("#mode", "threading")
    page.select_option("#workload", "count")
    page.fill("#param-n", work.threading_n)
    page.fill("#concurrency", work.concurrency or "10")
    page.get_by_role("button", name="Run race").click()
    page.wait_for_selector("#summary p", timeout=WAIT_MS)
    page.evaluate("window.scrollTo(0, 0)")  # bounding boxes are the viewport's: at the top, the page's too
    top = page.locator("#timeline").bounding_box()
    bottom = page.locator("#summary").bounding_box()
    if top is None or bottom is None:
        raise RuntimeError("the timeline or the summary is not on the page")
    page.screenshot(path=str(picture), full_page=True, clip={"x": top["x"] - 8, "y": top["y"] - 8,
                    "width": top["width"] + 16, "height": bottom["y"] + bottom["height"] - top["y"] + 16})  # fmt: skip
    sidecar(page, picture, "a threading race of count, from its timeline to its summary")
    print(f"wrote {picture}", file=sys.stderr)


def open_page(browser: Browser, base: str, viewport: tuple[int, int]) -> Page:
    page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
    page.goto(f"{base}/")
    page.wait_for_selector("body[data-ready=true]")
    return page


def take(base: str, args: argparse.Namespace) -> None:
    from playwright.sync_api import Error, sync_playwright  # noqa: PLC0415 -- a dev dependency, needed here only

    work = QUICK if args.quick else Work()
    out: Path = args.out
    series: Path | None = args.series
    seen = []
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = open_page(browser, base, DESKTOP)
            fill(page, work)
            seen.append(compare(page, work, series, out / "page-mid-race.png", "desktop"))
            threading_race(page, work, out / "time-split-threading.png")
            if series is not None:
                page = open_page(browser, base, PHONE)
                fill(page, work)
                seen.append(compare(page, work, series, None, "phone"))
        except Error as error:  # a timeout or a page that went away: one line, not a traceback
            raise RuntimeError(f"the page did not get there: {error.message.splitlines()[0]}") from None
        finally:
            browser.close()
    if series is not None:
        (series / "series.json").write_text(json.dumps(seen, indent=1) + "\n")
        print(f"wrote {series / 'series.json'}: {seen}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("scripts.screenshot", __doc__)
    parser.add_argument("--out", type=Path, default=IMG, metavar="DIR", help="the pictures' folder (docs/img)")
    parser.add_argument("--series", type=Path, metavar="DIR",
                        help="also each compare's start, 5s, mid and end, at 1366x768 and 390x844, in DIR")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="small workloads (for the tests), not the page's defaults")
    parser.add_argument("--server-args", default="", metavar="ARGS", help="flags for the lab server started here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    need_browser(TOOL)
    for folder in (args.out, args.series):
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
    return run_command(lambda: _run(args))


def _run(args: argparse.Namespace) -> None:
    with own_server(args.server_args, "screenshot-") as server:
        take(server.url, args)


if __name__ == "__main__":
    sys.exit(main())
