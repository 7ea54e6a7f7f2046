"""GET /workloads and GET /modes: what can run, how, with which params and limits."""

from __future__ import annotations

from handlers.base import LabHandler
from lab.modes.registry import MODES
from lab.web.json_handler import to_json
from workloads.registry import WORKLOADS, described


def runs_it(workload: str) -> list[str]:
    """The modes that can run `workload` (run any, or await it), but for those that refuse what it imports."""
    needs = WORKLOADS[workload].needs
    return [mode.name for mode in MODES.values() if mode.runs(workload) and mode.refusal(workload, needs) is None]


class WorkloadsHandler(LabHandler):
    """Every workload: its params and limits, whether it releases the GIL or waits, and the modes that run it."""

    def get(self) -> None:
        # A top-level JSON list (RequestHandler.write only serialises dicts), by the answers' one encoder.
        # With the modes that can run each (a mode may refuse a workload whose imports its workers cannot load).
        listed = [{**entry, "modes": runs_it(entry["name"])} for entry in described()]
        self.finish(to_json(listed))


class ModesHandler(LabHandler):
    """Every mode (lab/modes/registry.py): what it does, where it runs, its params, whether it runs here."""

    def get(self) -> None:
        self.finish(to_json([mode.describe() for mode in MODES.values()]))


routes = [(r"/workloads/?", WorkloadsHandler), (r"/modes/?", ModesHandler)]
