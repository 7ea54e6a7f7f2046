"""GET /workloads: what can run, its params and limits, and whether it releases the GIL."""

from __future__ import annotations

import json

from handlers.base import LabHandler
from workloads.registry import WORKLOADS


class WorkloadsHandler(LabHandler):
    def get(self) -> None:
        # A top-level JSON list (RequestHandler.write only serialises dicts).
        self.finish(json.dumps([w.describe() for w in WORKLOADS.values()]))


routes = [(r"/workloads/?", WorkloadsHandler)]
