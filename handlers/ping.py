"""GET /ping: the responsiveness probe (as little work as a request can be)."""

from __future__ import annotations

from handlers.base import LabHandler


class PingHandler(LabHandler):
    def get(self) -> None:
        self.write({"pong": True, "pid": self.services.pid})


routes = [(r"/ping", PingHandler)]
