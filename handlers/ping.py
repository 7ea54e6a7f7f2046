"""GET /ping: the responsiveness probe (as little work as a request can be); HEAD /ping for health checkers."""

from __future__ import annotations

from handlers.base import LabHandler


class PingHandler(LabHandler):
    """The responsiveness probe: {"pong": true, "pid", "gil", "core_wait"}, this process's meters included."""

    def get(self) -> None:
        # With this process's GIL contention and core wait lately (0-1, None if not
        # measured): the race's GIL track, told apart from starved cores.
        services = self.services
        self.write({"pong": True, "pid": services.pid, "gil": services.gil_contention, "core_wait": services.core_wait})

    # Health checkers send HEAD: the same answer, and Tornado leaves out the body.
    head = get


routes = [(r"/ping", PingHandler)]
