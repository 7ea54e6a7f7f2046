"""GET /{mode}[/{workload}]: one workload, in one mode (every mode in lab/modes.py with a runner)."""

from __future__ import annotations

from handlers.base import LabHandler, not_found
from handlers.envelope import envelope
from lab.errors import LabError
from workloads.registry import DEFAULT_WORKLOAD, WORKLOADS


class RunHandler(LabHandler):
    async def get(self, mode: str, name: str | None) -> None:
        runner = self.services.runners.get(mode)
        if runner is None:
            raise not_found(self.request.path)
        self.stats_mode = mode
        workload = WORKLOADS.get(name or DEFAULT_WORKLOAD)
        if workload is None:
            shown = name if len(name or "") <= 60 else f"{name[:60]}…"  # type: ignore[index]
            raise LabError(404, f"unknown workload {shown!r}; workloads: {', '.join(WORKLOADS)}")
        params = self.params(workload.parse)
        self.claim(mode, workload.name)
        work = runner.run(workload.name, params)
        # A blocking run happens inline, in this very call, so its response is
        # written before the loop takes the next request; inside a task, runs
        # queued meanwhile would cut in and the staircase would arrive as one
        # step. It cannot be cancelled anyway.
        record = await (work if runner.inline else self.until_disconnect(work))
        self.write(
            envelope(
                mode=mode,
                workload=workload.name,
                params=params,
                result=record["result"],
                server_pid=self.services.pid,
                task_id=self.services.task_id,
                worker_pid=record["pid"],
                worker_thread=record["thread"],
                received=self.received,
                started=record["started"],
                finished=record["finished"],
                cpu=record["cpu"],
                worker_address=record.get("address"),
            )
        )


# Any first path segment: the modes are the server's runners, so the registry
# decides what is served (an unknown one is the usual 404). Joined last in
# handlers/routes.py, after every fixed route.
routes = [(r"/([^/]+)(?:/([^/]+))?/?", RunHandler)]
