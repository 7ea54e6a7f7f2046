"""The soak's schedule: read the mix, time it, predict its capacity, then traffic, faults and quiet checks.

    setup     the mix from /modes and /workloads; a warm burst per mode; each entry timed alone (t);
              this machine's parallel capacity measured (lab/race/capacity.py); the rate: `load` x capacity
    warm-up   traffic at that rate, and (`rehearse`) every fault once, so that what the lab makes only once
              exists before anything is counted; then the baseline (bench/lib/soak/settle.py)
    soak      every `fault_every` seconds the next fault; `recover_s` of traffic after it; a quiet check
    end       at `minutes`: the traffic stops, one last quiet check

All along, a tick every `sample_every` seconds samples every process and
/stats, and prints the progress line.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.lib.soak.faults import Fault, Scene, strike
from bench.lib.soak.link import Link
from bench.lib.soak.mix import Choice, predict, read_mix, time_alone
from bench.lib.soak.settle import Settled, settle, warm, warm_plan
from bench.lib.soak.traffic import Traffic
from bench.lib.soak.watch import LabWatch
from lab.race import capacity as machine


@dataclass(frozen=True)
class Plan:
    """What the command line asked for (bench/soak.py)."""

    minutes: float
    warmup_s: float
    sample_every: float
    fault_every: float
    faults: tuple[str, ...]
    rehearse: bool
    load: float
    choice: Choice
    race_every: float
    ping_every: float
    settle_s: float
    recover_s: float
    timeout: float
    solo_runs: int
    seed: int = 0


@dataclass
class Run:
    """Everything a soak found, for bench/lib/soak/report.py."""

    plan: Plan
    link: Link
    watch: LabWatch
    mix_doc: dict[str, Any] = field(default_factory=dict)
    capacity: machine.Capacity | None = None
    rate: dict[str, Any] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    baseline: Settled | None = None
    checks: list[Settled] = field(default_factory=list)
    traffic: Traffic | None = None
    began: float = 0.0  # when the traffic began (watch time)
    ended: float = 0.0
    phase: str = "setup"


async def set_up(run: Run) -> Traffic:
    """The mix, timed; the machine's capacity; the traffic at `load` of the mix's predicted capacity."""
    plan, link = run.plan, run.link
    run.mix_doc = await read_mix(link, plan.choice)
    await run.watch.refresh("setup")
    await warm(link, warm_plan(run.mix_doc), set(run.watch.known.servers.values()))
    await time_alone(link, run.mix_doc["entries"], plan.solo_runs)
    run.capacity = await asyncio.to_thread(machine.measure, int(run.mix_doc["facts"]["cpu_count"]))
    prediction = predict(run.mix_doc["entries"], run.capacity.effective_cores, plan.load)
    run.rate = prediction.as_dict()
    return Traffic(link, run.mix_doc["entries"], prediction.rate_rps, plan.ping_every, plan.race_every,
                   prediction.cap, plan.seed)  # fmt: skip


async def soak(run: Run, say: Callable[[str], None]) -> None:
    """The whole schedule; whatever happens, the traffic and the ticks are stopped on the way out."""
    traffic = await set_up(run)
    say(f"mix of {len(run.mix_doc['entries'])} requests; capacity {run.rate['capacity_rps']:.2f}/s "
        f"({run.rate['bound']}); sending {run.rate['rate_rps']:.2f}/s for {run.plan.minutes:g} min")  # fmt: skip
    scene = Scene(run.link, run.watch, traffic, run.mix_doc, run.plan.settle_s)
    run.began = run.watch.now()
    run.traffic = traffic
    loops = [*traffic.start(), asyncio.create_task(_ticks(run, traffic, say))]
    try:
        await _warm_up(run, scene, traffic)
        await _faults(run, scene, traffic)
        await _sleep_until(run, run.began + 60 * run.plan.minutes)
        run.phase = "settle"
        run.checks.append(await settle(run.watch, traffic, warm_plan(run.mix_doc), "end", baseline=run.baseline,
                                       within=run.plan.settle_s))  # fmt: skip
        traffic.pause()
    finally:
        run.ended = run.watch.now()
        for loop in loops:
            loop.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await traffic.drain()


def rehearsal_order(faults: Sequence[str]) -> list[str]:
    """The faults as the warm-up strikes them: a kill-child first, since its replacement starts cold (without
    the memory a server gains as it meets the traffic) and then has the whole warm-up to warm."""
    return sorted(faults, key=lambda name: name != "kill-child")


async def _warm_up(run: Run, scene: Scene, traffic: Traffic) -> None:
    run.phase = "warm-up"
    if run.plan.rehearse:
        for name in rehearsal_order(run.plan.faults):
            await _strike(run, scene, name, "rehearsal", then="warm-up")
    await _sleep_until(run, run.began + run.plan.warmup_s)
    run.phase = "settle"
    run.baseline = await settle(run.watch, traffic, warm_plan(run.mix_doc), "baseline", baseline=None,
                                within=run.plan.settle_s)  # fmt: skip
    run.phase = "traffic"


async def _faults(run: Run, scene: Scene, traffic: Traffic) -> None:
    """The faults in turn, one every `fault_every` s, each followed by traffic then a quiet check, while there is
    time for one more before the end."""
    plan = run.plan
    end = run.began + 60 * plan.minutes
    due = run.watch.now() + plan.fault_every
    for name in itertools.cycle(plan.faults) if plan.faults else ():
        if due + plan.recover_s >= end:
            return
        await _sleep_until(run, due)
        run.phase = "fault"
        fault = await _strike(run, scene, name, "soak", then="traffic")
        run.phase = "settle"
        label = f"after fault {fault.number} ({name})"
        run.checks.append(await settle(run.watch, traffic, warm_plan(run.mix_doc), label, baseline=run.baseline,
                                       within=plan.settle_s))  # fmt: skip
        run.phase = "traffic"
        due = max(due + plan.fault_every, run.watch.now())


async def _strike(run: Run, scene: Scene, name: str, phase: str, *, then: str) -> Fault:
    """Strike fault `name`, then `then` (the run's phase) for --recover seconds still inside its window: what
    the lab does meanwhile (503s while a pool is replaced) is the fault's, in a rehearsal as in the soak."""
    fault = await strike(scene, name, len(run.faults), phase)
    run.faults.append(fault)
    run.phase = then
    await asyncio.sleep(run.plan.recover_s)
    fault.close()
    return fault


async def _sleep_until(run: Run, moment: float) -> None:
    await asyncio.sleep(max(0.0, moment - run.watch.now()))


async def _ticks(run: Run, traffic: Traffic, say: Callable[[str], None]) -> None:
    while True:
        samples = await run.watch.tick(run.phase)
        say(progress(run, traffic, samples))
        await asyncio.sleep(run.plan.sample_every)


def progress(run: Run, traffic: Traffic, samples: Sequence[Any]) -> str:
    """One line: time, phase, requests so far, the lab's processes, faults."""
    counts = run.link.ledger.counts()
    elapsed, total = run.watch.now() - run.began, 60 * run.plan.minutes
    rss = sum(s.rss_bytes for s in samples) / 2**20
    held = sum(1 for f in run.faults if f.ok)
    return (f"soak {_clock(elapsed)}/{_clock(total)} {run.phase:<8} | sent {sum(counts.values()):,} "
            f"ok {counts['ok']:,} error status {counts['error status']:,} aborted {counts['aborted']:,} "
            f"no answer {counts['no answer']:,} held back {traffic.held_back:,} "
            f"in flight {len(traffic.in_flight)} | {len(samples)} processes {rss:,.0f} MiB "
            f"{sum(s.fds for s in samples)} fds {sum(s.threads for s in samples)} threads | "
            f"faults {len(run.faults)} ({held} held)")  # fmt: skip


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


def stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
