"""The blocking mode's runner: the workload runs right here, on the event loop's thread."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Self

from workloads.registry import run_timed, warm_up
from workloads.timing import RunRecord

if TYPE_CHECKING:
    from lab.modes.contract import ServerConfig


class BlockingRunner:
    """Runs the workload right here, on the IOLoop thread: nothing else is served meanwhile."""

    inline = True
    settings = ()

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.idle = asyncio.Event()
        self.idle.set()  # a blocking run is over before anything can look

    @classmethod
    def from_config(cls, mode: str, config: ServerConfig) -> Self:
        return cls(mode)

    async def start(self) -> None:
        # This process is the worker for /blocking and /threading: pay its
        # one-off costs (the predict model) now, as the process pool's workers
        # do, so that the first timed predict does not include training.
        warm_up()

    async def run(self, workload: str, params: dict[str, Any]) -> RunRecord:
        return run_timed(workload, params)

    def snapshot(self) -> dict[str, Any]:
        return {"kind": "event loop", "size": 1}

    def facts(self) -> dict[str, Any]:
        return {}

    def ready_note(self) -> str | None:
        return None

    async def close(self, wait: bool = True) -> None:
        pass
