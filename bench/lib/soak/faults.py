"""The soak's faults: each does one harmful thing to the lab and says what it is designed to cause.

    kill-worker  SIGKILL a process-pool worker: jobs on that pool get 503, the pool is replaced (new pids)
    disconnect   hang up on a waiting request in every mode, on a half-sent request and on a race: the lab
                 counts each hang-up it saw (499) and drops the work; nothing of it stays behind
    job-timeout  a job longer than --job-timeout: 504, its pool replaced, jobs beside it 503
    burst        more requests at once than a pool and its --max-pending hold: the excess gets 503 at once
    kill-child   SIGKILL a forked server process: its connections are cut, it is replaced with the same task id,
                 and its pool workers and Dask worker go with it

A fault's `effects` are the results it may cause in its window (from its
start until the lab has recovered); bench/lib/soak/ledger.py counts a
request's error as expected only there. The processes are found from the
lab's /stats and killed with psutil, only once seen in the lab's own tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil

from bench.lib.soak.census import lab_tree
from bench.lib.soak.ledger import RACE_BUSY, Effect, Window
from bench.lib.soak.link import Link
from bench.lib.soak.mix import light
from bench.lib.soak.settle import busy
from bench.lib.soak.traffic import Traffic
from bench.lib.soak.watch import LabWatch

HANG_UP_AFTER_S = 0.3
# How soon after the disconnect fault hangs up on its race a race of the traffic may still find it running:
# the lab notices the close once its loop is free (the fault's own blocking request holds it 2 s).
RACE_RELEASE_S = 5.0
HANG_UP_SCALE = 2.0  # a hung-up request waits twice its default (sleep 2 s): still running when we hang up
BURST_SCALE = 0.5
POLL_S = 0.25


@dataclass
class Scene:
    """What a fault acts through: the link, the watch, the traffic, the mix; how long the lab may take to recover."""

    link: Link
    watch: LabWatch
    traffic: Traffic
    mix_doc: Mapping[str, Any]
    within: float


@dataclass
class Fault:
    """One fault: when, what it hit, what it is designed to cause, what was observed, whether it held."""

    number: int
    name: str
    phase: str
    started: float = 0.0
    ended: float = 0.0  # when it saw the lab recover
    # Its window closes when the soak's next step begins (the next fault, or a quiet check): what the lab went
    # through meanwhile (a queue that built while a server process restarted) still follows from it.
    until: float = 0.0
    designed: str = ""
    effects: tuple[Effect, ...] = ()
    target: str = ""
    observed: dict[str, Any] = field(default_factory=dict)
    ok: bool = False
    skipped: str | None = None

    def window(self) -> Window:
        return Window(self.number, self.started, max(self.ended, self.until), self.effects)

    def close(self) -> None:
        """The soak moves on: the window ends now."""
        self.until = time.time()


Action = Callable[[Scene, Fault], Awaitable[None]]


async def until(check: Callable[[], Awaitable[bool]], within: float) -> bool:
    """Poll `check` until it holds (True) or `within` seconds pass (False)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(POLL_S)
    return await check()


def process_pools(stats: Mapping[str, Any]) -> list[tuple[Any, str, list[int]]]:
    """(task id, mode, worker pids) of every pool of worker processes in /stats."""
    return [(p.get("task_id"), mode, list(pool.get("worker_pids", [])))
            for p in stats.get("processes", []) for mode, pool in p.get("pools", {}).items()
            if pool.get("kind") == "processes" and pool.get("worker_pids")]  # fmt: skip


def mix_modes(scene: Scene) -> list[str]:
    """The modes the soak sends traffic to, in the mix's order."""
    return list(dict.fromkeys(e.mode for e in scene.mix_doc["entries"] if e.mode is not None))


def mixed_pools(scene: Scene, stats: Mapping[str, Any]) -> list[tuple[Any, str, list[int]]]:
    """process_pools() of the modes in the mix only: a pool the soak sends nothing to is never warmed before
    a quiet check, and a replacement of it would count other descriptors than the baseline's (--modes async
    measured 24 where the baseline had 26)."""
    modes = set(mix_modes(scene))
    return [pool for pool in process_pools(stats) if pool[1] in modes]


def waiting_target(scene: Scene, mode: str, scale: float) -> str | None:
    """`mode`'s route to a workload that only waits (async: its own params), at `scale` of its defaults."""
    modes = {m["name"]: m for m in scene.mix_doc["modes"]}
    if not modes[mode].get("runs_workloads", True):
        query = light(modes[mode].get("params", []), scale, {})
        return f"/{mode}?" + "&".join(f"{k}={v}" for k, v in query.items())
    for work in scene.mix_doc["workloads"]:
        if work.get("waits") and mode in work.get("modes", [mode]):
            query = light(work["params"], scale, {})
            return f"/{mode}/{work['name']}?" + "&".join(f"{k}={v}" for k, v in query.items())
    return None


def kill(watch: LabWatch, pid: int) -> bool:
    """SIGKILL `pid` if it is a process of the lab's own tree (never a pid reused by someone else)."""
    if watch.root is None:
        return False
    for process, _role in lab_tree(watch.root, watch.known):
        if process.pid == pid:
            with contextlib.suppress(psutil.Error):
                process.kill()  # psutil checks it is still the process it found
                return True
    return False


async def kill_worker(scene: Scene, fault: Fault) -> None:
    pools = mixed_pools(scene, await scene.watch.refresh("fault"))
    if not pools:
        fault.skipped = "no pool of worker processes in the mix"
        return
    task, mode, pids = pools[0]
    fault.designed = f"/{mode} jobs on the broken pool get 503; the pool of task {task} is replaced"
    fault.effects = (Effect(503, mode),)
    fault.target = f"{mode} worker pid {pids[0]} of task {task}"
    if not kill(scene.watch, pids[0]):
        fault.skipped = f"pid {pids[0]} is not visible from here"
        return
    probe = waiting_target(scene, mode, 0.0) or f"/{mode}"
    new: list[int] = []

    async def replaced() -> bool:
        # A pool learns of a worker that died while idle from its next job: one is sent to each check.
        await scene.link.send("fault", probe, fault=fault.number)
        found = [p for t, m, p in process_pools(await scene.watch.refresh("fault")) if (t, m) == (task, mode)]
        new[:] = found[0] if found else []
        return bool(new) and not set(new) & set(pids) and len(new) == len(pids)

    fault.ok = await until(replaced, scene.within)
    fault.observed = {"killed": pids[0], "old_pids": pids, "new_pids": new}


async def kill_child(scene: Scene, fault: Fault) -> None:
    stats = await scene.watch.refresh("fault")
    if not stats["server"].get("forked"):
        fault.skipped = "the server is not forked: killing its one process would stop it"
        return
    victim = max(stats["processes"], key=lambda p: p["task_id"])
    task, pid = victim["task_id"], victim["pid"]
    below: list[psutil.Process] = []
    with contextlib.suppress(psutil.Error):
        below = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    fault.designed = (f"connections to task {task} are cut (no answer); it is replaced with the same task id; "
                      "meanwhile the others take its share, and their pools may fill (503)")  # fmt: skip
    fault.effects = (Effect(None), Effect(503))
    fault.target = f"server process pid {pid}, task {task}, and its {len(below) - 1} descendants"
    if not kill(scene.watch, pid):
        fault.skipped = f"pid {pid} is not visible from here"
        return
    now: dict[str, Any] = {}

    async def replaced() -> bool:
        stats = await scene.watch.refresh("fault")
        mine = [p for p in stats["processes"] if p["task_id"] == task]
        now["pid"] = mine[0]["pid"] if mine else None
        gone = not any(_alive(old) for old in below)
        return bool(mine) and mine[0]["pid"] != pid and gone and len(stats["processes"]) == stats["server"]["processes"]

    fault.ok = await until(replaced, scene.within)
    fault.observed = {"killed": pid, "descendants": [p.pid for p in below[1:]], "task_id": task,
                      "new_pid": now.get("pid")}  # fmt: skip


async def job_timeout(scene: Scene, fault: Fault) -> None:
    stats = await scene.watch.refresh("fault")
    pools = mixed_pools(scene, stats)
    limit = float(stats["server"]["job_timeout_s"])
    target = waiting_target(scene, pools[0][1], 1.0) if pools else None
    longer = _longer(scene, limit)
    if not pools or target is None or longer is None:
        fault.skipped = f"no waiting workload of a process pool can run past --job-timeout {limit:g} s"
        return
    mode = pools[0][1]
    route = f"/{mode}/{longer[0]}?{longer[1]}={longer[2]:g}"
    fault.designed = f"{route} gets 504 after {limit:g} s; its pool is replaced, jobs beside it get 503"
    fault.effects = (Effect(504, mode, own_only=True), Effect(503, mode))
    fault.target = route
    before = {(t, m): set(p) for t, m, p in pools}
    answer, _ = await scene.link.send("fault", route, fault=fault.number, allowed=longer[2] + scene.within)

    async def replaced() -> bool:
        after = {(t, m): set(p) for t, m, p in process_pools(await scene.watch.refresh("fault"))}
        return any(key in after and not after[key] & old for key, old in before.items())

    fault.ok = answer.status == 504 and await until(replaced, scene.within)
    fault.observed = {"status": answer.status or answer.error, "old_pids": sorted(set().union(*before.values()))}


def _longer(scene: Scene, limit: float) -> tuple[str, str, float] | None:
    """(workload, param, value) of a waiting workload whose number param can run past `limit` seconds: twice
    the limit where it may, since the deadline counts from when the server's loop hears that the job began,
    and a busy loop hears late."""
    for work in scene.mix_doc["workloads"]:
        for param in work["params"] if work.get("waits") else []:
            if param.get("type") == "number" and param["max"] >= limit + 1:
                return work["name"], param["name"], min(float(param["max"]), 2 * limit)
    return None


def _alive(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    return False


def _hung_up(stats: Mapping[str, Any]) -> dict[str, int]:
    """Requests the lab counted as 499 (its client went away), per mode, over all its processes."""
    totals = stats.get("totals", {}).get("requests", {})
    return {mode: int(doc.get("statuses", {}).get("499", 0)) for mode, doc in totals.items()}


async def disconnect(scene: Scene, fault: Fault) -> None:
    modes = mix_modes(scene)
    targets = {mode: t for mode in modes if (t := waiting_target(scene, mode, HANG_UP_SCALE)) is not None}
    before = _hung_up(await scene.watch.refresh("fault"))
    # What the lab can count depends on whether it read the request: one it read gets a 499 (a blocking run's once
    # its loop is free again: before the run if it waited its turn, at its end if it was under way); one never
    # read leaves nothing to count (a server process restarting, say). What must hold either way is that nothing
    # of it stays behind: the quiet check after this fault counts that.
    fault.designed = ("the lab counts the hang-ups it had read as 499 (client gone); the hung-up requests, the "
                      "half-sent one and the abandoned race leave nothing running or held; a race sent within "
                      f"{RACE_RELEASE_S:g} s of the hang-up may be refused busy")  # fmt: skip
    fault.target = ", ".join(targets.values())
    sends: list[Awaitable[Any]] = [scene.link.send("fault", t, fault=fault.number, hang_up_after=HANG_UP_AFTER_S)
                                   for t in targets.values()]  # fmt: skip
    sends.append(scene.link.send("fault", "/ping", fault=fault.number, half=True))
    raced = scene.traffic.race_every > 0 and bool(modes)
    if raced:
        first = next(e for e in scene.mix_doc["entries"] if e.mode == modes[0])
        sends.append(scene.traffic.race(first, fault=fault.number, hang_up_after=1.0))
    await asyncio.gather(*sends)
    if raced:
        # The soak sends its races one at a time: one that fell due meanwhile leaves as this one is hung up on.
        # The lab frees its one race a process only once its loop has read the close and reaped the load
        # generator (behind a blocking run, say), and refuses a race before that: busy, as designed.
        fault.effects = (Effect(None, race_refusal=RACE_BUSY, sent_by=time.time() + RACE_RELEASE_S),)
    counted: dict[str, int] = {}

    async def seen() -> bool:
        async with scene.watch.lock:  # (not beside a tick's /stats, which `busy` would count as one more request)
            stats = await scene.watch.refresh("fault")
        after = _hung_up(stats)
        counted.update({mode: after.get(mode, 0) - before.get(mode, 0) for mode in targets})
        return sum(counted.values()) >= len(targets) or not busy(stats)

    # A hang-up is counted by the time its request has ended in the lab, so with the traffic paused, once the lab
    # holds nothing, all it will ever count are in: the wait ends then, or once every one is counted. Waiting for
    # every one cost the soak --settle at every fault with one that never was. Held if the lab counted any at all.
    await scene.traffic.quiet()
    try:
        await until(seen, scene.within)
    finally:
        scene.traffic.resume()
    fault.ok = sum(counted.values()) >= 1
    fault.observed = {"hung_up": list(targets.values()), "half_sent": 1, "race_abandoned": raced,
                      "counted_499": counted}  # fmt: skip


async def burst(scene: Scene, fault: Fault) -> None:
    stats = await scene.watch.refresh("fault")
    pools = mixed_pools(scene, stats)
    target = waiting_target(scene, pools[0][1], BURST_SCALE) if pools else None
    if not pools or target is None:
        fault.skipped = "no pool of worker processes with a waiting workload"
        return
    mode = pools[0][1]
    processes = len(stats["processes"])
    size = int(stats["processes"][0]["pools"][mode]["size"])
    room = processes * (size + int(stats["server"]["max_pending"]))
    extra = processes * size + 2
    pending = stats["server"]["max_pending"]
    fault.designed = (f"{room + extra} requests at once to {target}: room for {room} ({processes} x ({size} running "
                      f"+ --max-pending {pending})), so at least {extra} get 503 at once")  # fmt: skip
    fault.effects = (Effect(503, mode),)
    fault.target = target
    answers = await asyncio.gather(*(scene.link.send("fault", target, fault=fault.number) for _ in range(room + extra)))
    statuses = [answer.status for answer, _ in answers]
    rejected, answered = statuses.count(503), statuses.count(200)
    fault.ok = rejected >= extra and rejected + answered == len(statuses)
    fault.observed = {"sent": len(statuses), "ok": answered, "503": rejected, "designed_503_at_least": extra,
                      "other": len(statuses) - rejected - answered}  # fmt: skip


FAULTS: dict[str, Action] = {
    "kill-worker": kill_worker,
    "disconnect": disconnect,
    "job-timeout": job_timeout,
    "burst": burst,
    "kill-child": kill_child,
}


async def strike(scene: Scene, name: str, number: int, phase: str) -> Fault:
    """Do fault `name` (number `number` of the run) and wait for the lab to recover from it."""
    fault = Fault(number, name, phase, started=time.time())
    try:
        await FAULTS[name](scene, fault)
    except RuntimeError as error:  # the lab stopped answering /stats
        fault.ok, fault.observed = False, {**fault.observed, "error": str(error)}
    fault.ended = time.time()
    return fault
