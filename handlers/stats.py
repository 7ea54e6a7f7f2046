"""GET /stats: what uwsgitop shows, for every process of this server."""

from __future__ import annotations

import time
from functools import cache
from typing import Any

import psutil
from threadpoolctl import threadpool_info

from handlers.base import LabHandler
from lab.instruments.freethreading import report as interpreter_report
from lab.instruments.stats import merge, summarise
from lab.modes.contract import Runner
from lab.modes.registry import MODES


@cache
def native_threads() -> list[dict[str, Any]]:
    """BLAS/OpenMP pools and their sizes as loaded in this process (pool workers
    inherit its environment); read on first use, as they are fixed once loaded."""
    keys = ("user_api", "internal_api", "num_threads", "version")
    return [{key: info.get(key) for key in keys} for info in threadpool_info()]


def pool_listing(facts: dict[str, Any], runners: dict[str, Runner]) -> dict[str, Any]:
    """The server's facts with only the pools this Python can run: each pool's size under `available_pools`,
    and each mode it cannot run under `unavailable_modes` with why (its size setting left out of the facts)."""
    unavailable = {name: why for name in runners if (why := MODES[name].unavailable())}
    sizes = {name: runner.facts() for name, runner in runners.items()}
    gone = {key for name in unavailable for key in sizes[name]}
    pools = {key: value for name, found in sizes.items() if name not in unavailable
             for key, value in found.items() if key.endswith("_pool")}  # fmt: skip
    kept = {key: value for key, value in facts.items() if key not in gone}
    return kept | {"available_pools": pools, "unavailable_modes": unavailable}


def _usage(pid: int) -> dict[str, Any]:
    """RSS and CPU seconds of a live process, read now."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            cpu = process.cpu_times()
            return {"alive": True, "rss_bytes": process.memory_info().rss, "cpu_s": round(cpu.user + cpu.system, 3)}
    except psutil.Error:
        return {"alive": False}


def _render(doc: dict[str, Any], now: float) -> dict[str, Any]:
    pools = doc["pools"]
    for pool in pools.values():
        if pool.get("kind") == "processes":  # a pool of worker processes here: each one's usage, read now
            busy = set(pool.get("busy_workers", []))
            pool["workers"] = [{"pid": pid, "busy": pid in busy, **_usage(pid)} for pid in pool.get("worker_pids", [])]
    return {
        "pid": doc["pid"],
        "task_id": doc["task_id"],
        "uptime_s": round(now - doc["started"], 3),
        "restarts": doc["restarts"],
        "active_requests": doc["active_requests"],
        "gil_enabled": doc.get("gil_enabled"),
        "gil_contention": doc.get("gil_contention"),
        "core_wait": doc.get("core_wait"),
        **_usage(doc["pid"]),
        "requests": summarise(doc["requests"]),
        "pools": pools,
    }


class StatsHandler(LabHandler):
    """Per server process and pool: requests, errors, latency, jobs running and waiting, RSS, CPU, GIL, cores."""

    def get(self) -> None:
        services = self.services
        services.publish()  # our own slot, fresh
        docs = services.board.docs()
        now = time.time()
        config = services.config
        self.write(
            {
                "server": {
                    "answered_by": {"pid": services.pid, "task_id": services.task_id},
                    **pool_listing(services.facts(), services.runners),
                    "max_pending": config.max_pending,
                    "job_timeout_s": config.job_timeout,
                    "url": services.base_url,
                    "native_threads": native_threads(),
                    "interpreter": interpreter_report(),
                },
                "totals": {"requests": summarise(merge([doc["requests"] for doc in docs]))},
                "processes": [_render(doc, now) for doc in docs],
            }
        )


routes = [(r"/stats/?", StatsHandler)]
