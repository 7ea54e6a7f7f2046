"""GET /{mode}[/{workload}]: one run in one mode (every mode in lab/modes/registry.py); a mode that runs its own
workload (async) takes its params at /{mode}, and awaits the workloads written to be awaited at /{mode}/{workload}."""

from __future__ import annotations

from handlers.base import LabHandler, not_found
from lab.errors import LabError
from lab.modes.registry import MODES
from lab.runs import Refused, check, envelope, own, resolve
from workloads.page.errors import Unavailable

# How long a client should wait before asking again for a page whose database is unavailable.
DATABASE_RETRY_AFTER_S = 2


class RunHandler(LabHandler):
    runs_work = True

    async def get(self, name: str, workload_name: str | None) -> None:
        runner = self.services.runners.get(name)
        if runner is None:
            raise not_found(self.request.path)
        mode = MODES[name]
        self.life.classify(mode.name)
        try:
            run = resolve(mode.name, workload_name, self.query, runs=own(mode))
            check(mode, run)
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
        services = self.services
        self.write(envelope(run, record, received=self.life.received, pid=services.pid, task_id=services.task_id))


# Any first path segment: the modes are the server's runners, so the registry
# decides what is served (an unknown one is the usual 404). Joined last in
# handlers/routes.py, after every fixed route.
routes = [(r"/([^/]+)(?:/([^/]+))?/?", RunHandler)]
