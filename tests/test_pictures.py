"""The pictures of the page in docs/img are the page as it is: each was taken (scripts/screenshot.py) while
the page's legend said what static/index.html's legend says now, and the script still takes them."""

from __future__ import annotations

import json
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from lab import ROOT
from scripts.screenshot import IMG, PICTURES
from tests.bench_helpers import Tracked, is_png

RETAKE = "the page's legend changed since this picture was taken: retake it with `make pictures`"


class LegendWords(HTMLParser):
    """The words of each item of the page's legend (<ul class="legend">) and of its note (<p class="legend-note">)."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[str] = []
        self.note = ""
        self._in: str | None = None
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "ul" and "legend" in classes:
            self._in = "legend"
        elif tag == "p" and "legend-note" in classes:
            self._in = "note"
        elif tag == "li" and self._in == "legend":
            self.items.append("")

    def handle_endtag(self, tag: str) -> None:
        if (tag, self._in) in {("ul", "legend"), ("p", "note")}:
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "legend" and self.items:
            self.items[-1] += data
        elif self._in == "note":
            self.note += data


def page_legend() -> tuple[list[str], str]:
    parser = LegendWords()
    parser.feed((ROOT / "static" / "index.html").read_text())
    return [" ".join(item.split()) for item in parser.items], " ".join(parser.note.split())


def test_the_legend_is_read_from_the_page() -> None:
    legend, note = page_legend()
    assert "computing (one colour per worker)" in legend and "its own wait: a sleep, a query, the upstream" in legend
    assert "how long /ping waited (the worst of each 0.1 s)" in legend  # <code> inside an item
    assert note.startswith("After its hatched wait")


@pytest.mark.parametrize("name", sorted(PICTURES))
def test_each_picture_of_the_page_shows_the_legend_it_has_now(name: str) -> None:
    picture = IMG / name
    assert is_png(picture)
    taken = json.loads(picture.with_suffix(".json").read_text())
    legend, note = page_legend()
    assert taken["legend"] == legend, RETAKE
    assert taken["legend_note"] == note, RETAKE


def test_the_docs_show_every_picture_the_script_takes() -> None:
    docs = "\n".join(path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    for name in PICTURES:
        assert f"img/{name}" in docs, name


@pytest.mark.browser
@pytest.mark.timeout(600)  # a server, a compare of every mode and a race, on a machine others share
def test_the_script_takes_them_from_the_page_and_stops_what_it_started(tmp_path: Path) -> None:
    with Tracked([sys.executable, "-m", "scripts.screenshot", "--quick", "--out", str(tmp_path)]) as tracked:
        _, err = tracked.communicate(timeout=540)
        assert tracked.survivors() == []  # its server, the server's workers, chromium
    assert tracked.process.returncode == 0, err
    legend, note = page_legend()
    for name in PICTURES:
        assert is_png(tmp_path / name) and f"wrote {tmp_path / name}" in err
        taken = json.loads((tmp_path / name).with_suffix(".json").read_text())
        assert (taken["legend"], taken["legend_note"]) == (legend, note)
        assert taken["viewport"][0] == 1366 and taken["commit"]
