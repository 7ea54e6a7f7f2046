"""GET /{mode}[/{workload}]: one run in one mode (every mode in lab/modes.py); a mode that runs no workload
(async) takes its own params at /{mode}."""

from __future__ import annotations

from typing import Any

from handlers.base import LabHandler, not_found
from handlers.envelope import envelope
from lab.errors import LabError
from lab.modes import MODES, Mode
from workloads.registry import DEFAULT_WORKLOAD, WORKLOADS


class RunHandler(LabHandler):
    async def get(self, name: str, workload_name: str | None) -> None:
        runner = self.services.runners.get(name)
        if runner is None or (workload_name is not None and not MODES[name].runs_workloads):
            raise not_found(self.request.path)  # (/async/anything: nothing is served there)
        mode = MODES[name]
        self.life.classify(mode.name)
        workload, params = self._what(mode, workload_name)
        self._check_can_run(mode, workload)
        self.life.claim(workload)
        work = runner.run(workload, params)
        # A blocking run happens inline, in this very call, so its response is
        # written before the loop takes the next request; inside a task, runs
        # queued meanwhile would cut in and the staircase would arrive as one
        # step. It cannot be cancelled anyway.
        record = await (work if runner.inline else self.until_disconnect(work))
        self.life.ran(record["cpu"])
        self.write(
            envelope(
                mode=mode.name,
                workload=workload,
                params=params,
                result=record["result"],
                server_pid=self.services.pid,
                task_id=self.services.task_id,
                worker_pid=record["pid"],
                worker_thread=record["thread"],
                received=self.life.received,
                started=record["started"],
                finished=record["finished"],
                cpu=record["cpu"],
                core_wait=record["core_wait"],
                blocked=record["blocked"],
                gil_wait=record["gil_wait"],
                worker_address=record.get("address"),
                worker_interpreter=record.get("interpreter"),
            )
        )

    def _check_can_run(self, mode: Mode, workload: str) -> None:
        """A 501 where this server's Python cannot run the mode; a 422 where the mode cannot run the workload."""
        problem = mode.unavailable()
        if problem is not None:
            raise LabError(501, f"/{mode.name} cannot run on this server: {problem}")
        entry = WORKLOADS.get(workload)
        refusal = mode.refusal(workload, entry.needs) if entry is not None else None
        if refusal is not None:
            raise LabError(422, refusal)

    def _what(self, mode: Mode, name: str | None) -> tuple[str, dict[str, Any]]:
        """The workload this request runs and its params: one of the lab's, or what the mode runs itself."""
        if mode.workload is not None:
            return mode.workload, self.params(mode.parse)
        workload = WORKLOADS.get(name or DEFAULT_WORKLOAD)
        if workload is None:
            shown = name if len(name or "") <= 60 else f"{name[:60]}…"  # type: ignore[index]
            raise LabError(404, f"unknown workload {shown!r}; workloads: {', '.join(WORKLOADS)}")
        return workload.name, self.params(workload.parse)


# Any first path segment: the modes are the server's runners, so the registry
# decides what is served (an unknown one is the usual 404). Joined last in
# handlers/routes.py, after every fixed route.
routes = [(r"/([^/]+)(?:/([^/]+))?/?", RunHandler)]
