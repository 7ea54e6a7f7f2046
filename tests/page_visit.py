"""What the page tests share: Chromium, a visit that records every request and console error, and races
whose events reach the page only when a test lets them (the page under a server's real events, in steps)."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from playwright.sync_api import Browser, ConsoleMessage, Page, WebSocketRoute, sync_playwright

# (chromium_path fails, never skips, when there is no chromium: CI installs it.)
from bench.lib.browser import launch

# Generous: other suites may share the cores. The suite run beside a soak at 70 % of the machine saw a race
# of ten /processing/count?n=30000000 (and a /distributed race) not summed up within 60 s.
RACE_TIMEOUT_MS = 180_000
# Per test (pyproject's 120 s is less than one race may take then): races, each within RACE_TIMEOUT_MS.
BROWSER_TEST_TIMEOUT_S = 600
DESKTOP = {"width": 1366, "height": 768}
PHONE = {"width": 390, "height": 844}


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's chromium (Playwright's own download is not used); each launch gets a fresh temporary profile."""
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Visit:
    page: Page
    origin: str
    urls: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def assert_clean(self) -> None:
        assert self.errors == []
        assert self.urls, "no request was recorded"
        for url in self.urls:
            parts = urlsplit(url)
            assert (parts.scheme, parts.netloc) in {("http", self.origin), ("ws", self.origin)}, url


@contextlib.contextmanager
def visiting(browser: Browser, base_url: str, viewport: dict[str, int]) -> Iterator[Visit]:
    """The page in a fresh context of this size, loaded and ready, every request and console error recorded."""
    context = browser.new_context(viewport=viewport, base_url=base_url)  # type: ignore[arg-type]
    try:
        page = context.new_page()
        seen = Visit(page, urlsplit(base_url).netloc)

        def on_console(message: ConsoleMessage) -> None:
            if message.type == "error":
                seen.errors.append(message.text)

        page.on("console", on_console)
        page.on("pageerror", lambda error: seen.errors.append(str(error)))
        page.on("request", lambda request: seen.urls.append(request.url))
        page.on("websocket", lambda socket: seen.urls.append(socket.url))
        yield seen
    finally:
        context.close()


def load(visit: Visit) -> Page:
    visit.page.goto("/")
    visit.page.wait_for_selector("body[data-ready=true]")
    return visit.page


CLOSED = object()  # the server closed the socket


@dataclass
class Held:
    """One race socket: the server's messages, held until the test passes them on to the page."""

    page_side: WebSocketRoute
    queue: list[Any] = field(default_factory=list)
    passed: list[dict[str, Any]] = field(default_factory=list)

    def release(self, page: Page, until: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any] | None:
        """Pass the held messages on, up to the first event `until` accepts (None: all, and the close); that event."""
        deadline = time.monotonic() + RACE_TIMEOUT_MS / 1000
        while time.monotonic() < deadline:
            while self.queue:
                message = self.queue.pop(0)
                if message is CLOSED:
                    self.page_side.close()
                    return None
                self.page_side.send(message)
                event: dict[str, Any] = json.loads(message)
                self.passed.append(event)
                if until is not None and until(event):
                    return event
            page.wait_for_timeout(50)  # Playwright delivers the server's messages meanwhile
        raise AssertionError(f"the race did not get there; passed {[e['event'] for e in self.passed]}")


class HeldRaces:
    """Every race the page starts goes to the real server; what the server says waits for the test.

    `edit(event)` may change an event before the page sees it (a summary's ratio, an envelope's timing).
    """

    def __init__(self, page: Page, edit: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.sockets: list[Held] = []
        self.edit = edit
        page.route_web_socket(re.compile(r"/race$"), self._route)

    def _route(self, socket: WebSocketRoute) -> None:
        server = socket.connect_to_server()
        held = Held(socket)

        def on_message(message: str | bytes) -> None:
            event = json.loads(message)
            if self.edit is not None:
                self.edit(event)
            held.queue.append(json.dumps(event))

        server.on_message(on_message)
        server.on_close(lambda code, reason: held.queue.append(CLOSED))
        self.sockets.append(held)

    def next(self, page: Page, number: int) -> Held:
        """The page's race number `number` (from 0), once it has opened its socket."""
        deadline = time.monotonic() + RACE_TIMEOUT_MS / 1000
        while len(self.sockets) <= number:
            if time.monotonic() > deadline:
                raise AssertionError(f"the page opened {len(self.sockets)} race sockets, not {number + 1}")
            page.wait_for_timeout(50)
        return self.sockets[number]


def is_event(kind: str) -> Callable[[dict[str, Any]], bool]:
    return lambda event: event["event"] == kind


def assert_labels_fit(page: Page, chart: str = "#timeline") -> None:
    """Every lane label of the chart ends before its plot begins (measured where the browser drew it)."""
    svg = page.locator(chart)
    box = svg.bounding_box()
    assert box is not None
    scale = box["width"] / float((svg.get_attribute("viewBox") or "0 0 1 1").split()[2])
    plot_left = box["x"] + scale * float(svg.get_attribute("data-plot-left") or 0)
    labels = svg.locator(".lane-label text")
    assert labels.count(), "no lane label drawn"
    for i in range(labels.count()):
        text = labels.nth(i)
        drawn = text.bounding_box()
        assert drawn is not None
        assert box["x"] <= drawn["x"] and drawn["x"] + drawn["width"] <= plot_left + 0.5, (text.text_content(), drawn)
