"""GET /ping: the responsiveness probe (as little work as a request can be); HEAD /ping for health checkers."""

from __future__ import annotations

from handlers.base import LabHandler


class PingHandler(LabHandler):
    """The responsiveness probe: {"pong": true, "pid", "gil"}, this process's GIL meter included."""

    def get(self) -> None:
        # With the GIL's contention in this process lately (0-1, None if not measured): the race's GIL track.
        self.write({"pong": True, "pid": self.services.pid, "gil": self.services.gil_contention})

    # Health checkers send HEAD: the same answer, and Tornado leaves out the body.
    head = get


routes = [(r"/ping", PingHandler)]
