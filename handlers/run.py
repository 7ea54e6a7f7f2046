"""GET /{mode}[/{workload}]: one run in one mode (every mode in lab/modes/registry.py); a mode that runs its own
workload (async) takes its params at /{mode}, and awaits the workloads written to be awaited at /{mode}/{workload}."""

from __future__ import annotations

from typing import Any

from tornado.httputil import HTTPServerRequest
from tornado.routing import PathMatches

from handlers.base import LabHandler, not_found
from lab.errors import LabError
from lab.modes.registry import MODES
from lab.runs import Refused, envelope
from workloads.page.errors import Unavailable

# How long a client should wait before asking again for a page whose database is unavailable.
DATABASE_RETRY_AFTER_S = 2


class ModePath(PathMatches):
    """/{mode}[/{workload}] for a mode in the registry, read at each request (a mode added to it is served).

    Only the modes, so that the route can come early (handlers/routes.py):
    Tornado tries each route's pattern in turn, and every run would otherwise
    pay for every fixed route's first. Any other path is the usual 404
    (handlers/base.py's NotFoundHandler).
    """

    def match(self, request: HTTPServerRequest) -> dict[str, Any] | None:
        found = super().match(request)
        mode = found["path_args"][0] if found is not None else None
        return found if mode is not None and mode.decode("utf-8", "replace") in MODES else None


class RunHandler(LabHandler):
    runs_work = True
    matcher = ModePath  # how handlers/routes.py matches its pattern

    async def get(self, name: str, workload_name: str | None) -> None:
        runner = self.services.runners.get(name)
        if runner is None:
            raise not_found(self.request.path)
        mode = MODES[name]
        self.life.classify(mode.name)
        try:
            run = self.services.runs.get(mode, workload_name, self.request.query, self.query)
        except Refused as refused:
            raise LabError(refused.status, refused.message) from None
        self.life.claim(self.services.share(run.mode, run.workload))
        if runner.inline and self.life.departed():
            # A blocking run holds the loop and cannot be stopped once begun;
            # one whose client left while it waited its turn is not begun (499,
            # as a pool job whose client left while it waited for a worker).
            self.client_left()
        work = runner.run(run.workload, run.params)
        # A blocking run happens inline, in this very call, so its response is
        # written before the loop takes the next request; inside a task, runs
        # queued meanwhile would cut in and the staircase would arrive as one
        # step. It cannot be cancelled anyway.
        try:
            record = await (work if runner.inline else self.until_disconnect(work))
        except Unavailable as gone:  # the database refused or went away: try again later, as for a full pool
            raise LabError(503, str(gone), retry_after=DATABASE_RETRY_AFTER_S) from None
        self.life.ran(record["cpu"])
        if runner.inline and self.life.departed():
            # A blocking run holds the loop, so it cannot see its client go while it runs; one that left meanwhile
            # gets no answer, a 499 as for a pool job whose client left while it ran, its CPU counted all the same.
            self.client_left()
        services = self.services
        self.write(envelope(run, record, received=self.life.received, pid=services.pid, task_id=services.task_id))


routes = [(r"/([^/]+)(?:/([^/]+))?/?", RunHandler)]
