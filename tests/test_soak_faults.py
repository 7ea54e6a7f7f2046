"""The soak's disconnect fault, against a scripted lab: what it waits for before it reads the lab's 499s."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from bench.lib.soak.faults import Fault, Scene, disconnect

SLEEP = {"name": "sleep", "waits": True, "modes": ["blocking", "threading"],
         "params": [{"name": "seconds", "type": "number", "default": 1.0, "min": 0.0, "max": 60.0}]}  # fmt: skip


class _Lab:
    """/stats as a lab gives it: the 499s it has counted so far, and whether it holds anything but this /stats.
    Each poll after the fault's requests went out is one step of `script`; a poll past its end is a failure."""

    def __init__(self, script: list[tuple[dict[str, int], bool]], traffic: _Traffic) -> None:
        self.script = script
        self.traffic = traffic
        self.polls: list[bool] = []  # whether the traffic was paused at each poll after the hang-ups
        self.lock = asyncio.Lock()  # (ticks and polls take turns: bench/lib/soak/watch.py)

    async def refresh(self, phase: str) -> dict[str, Any]:
        hung_up: dict[str, int] = {}  # (none, and nothing held, before the fault sent anything)
        busy = False
        if self.traffic.sent:
            if not self.script:
                raise AssertionError("polled on after the lab held nothing")
            hung_up, busy = self.script.pop(0)
            self.polls.append(self.traffic.paused)
        totals = {mode: {"statuses": {"499": n}} for mode, n in hung_up.items()}
        return {"totals": {"requests": totals}, "processes": [{"active_requests": 3 if busy else 1, "pools": {}}]}


class _Traffic:
    race_every = 0.0  # (no race: the fault hangs up on one only when the traffic races)

    def __init__(self) -> None:
        self.sent = 0
        self.paused = False
        self.calls: list[str] = []

    async def quiet(self) -> None:
        self.paused = True
        self.calls.append("quiet")

    def resume(self) -> None:
        self.paused = False
        self.calls.append("resume")


class _Link:
    def __init__(self, traffic: _Traffic) -> None:
        self.traffic = traffic
        self.targets: list[str] = []

    async def send(self, kind: str, target: str, **how: Any) -> tuple[Any, Any]:
        self.traffic.sent += 1
        self.targets.append(target)
        return SimpleNamespace(status=None), None


def _strike(script: list[tuple[dict[str, int], bool]], within: float = 3600.0) -> tuple[Fault, _Lab, _Link]:
    traffic = _Traffic()
    lab, link = _Lab(script, traffic), _Link(traffic)
    mix = {"entries": [SimpleNamespace(mode="blocking"), SimpleNamespace(mode="threading")],
           "modes": [{"name": "blocking"}, {"name": "threading"}], "workloads": [SLEEP]}  # fmt: skip
    scene: Any = Scene(link, lab, traffic, mix, within)  # type: ignore[arg-type]
    fault = Fault(0, "disconnect", "soak", started=0.0)
    asyncio.run(disconnect(scene, fault))
    return fault, lab, link


def test_a_hang_up_the_lab_never_counts_is_not_waited_for_once_the_lab_holds_nothing() -> None:
    # The blocking hang-up never becomes a 499 (the lab never read it: its server process was restarting, say).
    # Once the lab holds nothing (the traffic paused), no more will come; waiting for --settle (an hour here)
    # would be the failure.
    fault, lab, link = _strike([({}, True), ({"threading": 1}, True), ({"threading": 1}, False)])
    assert link.targets[:2] == ["/blocking/sleep?seconds=2", "/threading/sleep?seconds=2"]
    assert fault.ok and fault.observed["counted_499"] == {"blocking": 0, "threading": 1}
    assert lab.polls == [True, True, True]  # every poll with the traffic paused, and resumed after
    assert lab.traffic.calls == ["quiet", "resume"]


def test_every_hang_up_counted_ends_the_wait_though_the_lab_is_busy() -> None:
    fault, _, _ = _strike([({"blocking": 1}, True), ({"blocking": 1, "threading": 1}, True)])
    assert fault.ok and fault.observed["counted_499"] == {"blocking": 1, "threading": 1}


def test_none_counted_by_the_time_the_lab_holds_nothing_does_not_hold() -> None:
    fault, lab, _ = _strike([({}, True), ({}, False)])
    assert not fault.ok and fault.observed["counted_499"] == {"blocking": 0, "threading": 0}
    assert lab.traffic.calls == ["quiet", "resume"]
