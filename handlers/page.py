"""GET /: the lab page."""

from __future__ import annotations

from pathlib import Path

from handlers.base import LabHandler

PAGE = Path(__file__).resolve().parent.parent / "static" / "index.html"


class PageHandler(LabHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        self.write(PAGE.read_bytes())


routes = [(r"/", PageHandler)]
