"""Faults on a cluster across hosts (bench/lib/hosts.py), each struck in the middle of a burst, every request counted.

    row = strike(hosts, FAULTS["worker-cut"], Burst(job_timeout=15, ...))

A fault strikes one host once a burst of requests is under way, lasts
`hold_s`, and is undone (a cable mended, a link's limit lifted; killed
processes are started again by the cluster's keeper, as a deployment would).
While it lasts a watcher reads the lab's /stats every POLL_S: the
scheduler's view of the workers, as the lab polls it, and the lab's own
view of the scheduler. A row says what each request got (200, 503 with
Retry-After, ...; `unaccounted` counts those that got no answer at all), how
long the slowest took against the bound (--job-timeout plus the cluster's
detection time), when the cluster noticed, and how soon after the fault was
undone the lab answered 200 again and the cluster was whole again.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.lib.hosts import WORKERS, HostCluster, Reply
from bench.lib.netns import Network
from bench.lib.ticker import Ticker

POLL_S = 0.25  # how often /stats is read while a fault lasts (a read is a few ms of the lab's time)
SETTLE_S = 120.0  # how long a cluster gets to be whole and serving before a fault
RECOVERY_S = 60.0  # how long after a fault is undone the lab and the cluster are watched for recovery
QUIET_S = 5.0  # the lab calls a worker silent past this (lab/modes/distributed/roster.py's WORKER_SILENT_S)


@dataclass(frozen=True)
class Fault:
    """One fault: which host it strikes, what it does there and how it is undone after `hold_s`."""

    name: str
    what: str
    role: str
    hold_s: float
    inject: Callable[[Network, str], None]
    restore: Callable[[Network, str], None] | None = None


def _kill(net: Network, role: str) -> None:
    net.kill(role)


def _crawl(net: Network, role: str) -> None:
    net.shape(role, CRAWL)


def _unlimited(net: Network, role: str) -> None:
    net.shape(role, None)


CRAWL = "8kbit"
FAULTS = {
    fault.name: fault
    for fault in (
        Fault("worker-cut", "a worker host's cable pulled (silent: no RST, no FIN), mended after 25 s", "w1", 25.0,
              Network.cut, Network.mend),
        Fault("worker-killed", "a worker host's processes SIGKILLed (nanny and worker); its keeper starts them "
              "again", "w1", 0.0, _kill),
        Fault("scheduler-cut-short", "the scheduler's cable pulled for 2 s, less than the lab's 5 s", "sched", 2.0,
              Network.cut, Network.mend),
        Fault("scheduler-cut-long", "the scheduler's cable pulled for 8 s, more than the lab's 5 s, less than the "
              "tuned TCP timeout (20 s)", "sched", 8.0, Network.cut, Network.mend),
        Fault("worker-crawl", f"a worker host's link throttled to {CRAWL} (tbf) for 15 s", "w1", 15.0, _crawl,
              _unlimited),
        Fault("scheduler-cut-longer", "the scheduler's cable pulled for 25 s, more than the tuned TCP timeout (20 s):"
              " the workers close themselves", "sched", 25.0, Network.cut, Network.mend),
    )
}  # fmt: skip
QUICK_FAULTS = ("worker-cut", "worker-killed", "scheduler-cut-short", "scheduler-cut-long", "worker-crawl")


@dataclass(frozen=True)
class Burst:
    """The burst a fault strikes: `requests` concurrent GETs of `path`; the lab's --job-timeout; the bound."""

    path: str
    requests: int
    job_timeout: float
    detection_s: float  # the cluster's worst time to notice a silent worker (bench/lib/hosts.py's DaskTimeouts)

    @property
    def bound_s(self) -> float:
        """No request may take longer: its deadline plus the time the cluster takes to notice what happened."""
        return self.job_timeout + self.detection_s


class Watcher(Ticker):
    """Reads the lab's /stats every POLL_S in a thread: (time, scheduler state, worker addresses, quiet seconds)."""

    def __init__(self, hosts: HostCluster) -> None:
        super().__init__("stats-watcher", POLL_S)
        self.hosts = hosts
        self.samples: list[tuple[float, str, dict[str, float]]] = []

    def tick(self) -> None:
        reply = self.hosts.get("/stats", 5)
        if reply.status == 200 and isinstance(reply.body, dict):
            dask = reply.body["server"]["dask"]
            workers = {str(w["address"]): float(w.get("quiet_s") or 0.0) for w in dask.get("workers") or []}
            self.samples.append((reply.received, str(dask.get("state")), workers))

    def changes(self, after: float, victim: str | None) -> list[tuple[float, str, int, float | None]]:
        """From `after`: (seconds, scheduler state, workers listed, the victim's quiet seconds or None if not
        listed) at each sample where the state, the count or the victim's presence changed, or it went quiet."""
        shown: list[tuple[float, str, int, float | None]] = []
        last: tuple[str, int, bool, bool] | None = None
        for at, state, workers in self.samples:
            if at < after:
                continue
            quiet = workers.get(str(victim))
            now = (state, len(workers), quiet is not None, (quiet or 0.0) >= QUIET_S)
            if now != last:
                shown.append((round(at - after, 2), state, len(workers), quiet))
                last = now
        return shown

    def wait(self, after: float, holds: Callable[[str, dict[str, float]], bool], timeout: float) -> float | None:
        """`first(after, holds)`, waiting up to `timeout` seconds from `after` for a sample where it holds."""
        while (found := self.first(after, holds)) is None and time.time() - after < timeout:
            time.sleep(POLL_S)
        return found

    def first(self, after: float, holds: Callable[[str, dict[str, float]], bool]) -> float | None:
        """Seconds from `after` to the first sample at or after it where `holds(state, workers)`; None if never."""
        for at, state, workers in self.samples:
            if at >= after and holds(state, workers):
                return round(at - after, 2)
        return None


def settle(hosts: HostCluster, timeout: float = SETTLE_S) -> None:
    """Wait until the lab sees every worker, none of them quiet, and answers a task with 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = {str(w["address"]): float(w.get("quiet_s") or 0.0) for w in hosts.workers()}
        if _whole(workers) and hosts.get("/distributed/sleep?seconds=0", 30).status == 200:
            return
        time.sleep(0.5)
    raise RuntimeError(f"the cluster was not whole and serving within {timeout:g} s; lab log:\n{hosts.log('lab')}")


def address_of(hosts: HostCluster, role: str) -> str | None:
    """The address of the Dask worker on host `role`, as the lab's /stats lists it."""
    host = hosts.net[role].address
    return next((str(w["address"]) for w in hosts.workers() if f"//{host}:" in str(w["address"])), None)


def strike(hosts: HostCluster, fault: Fault, burst: Burst) -> dict[str, Any]:
    """Run `burst`, strike `fault` once its tasks run, undo it after hold_s: the fault's row."""
    settle(hosts)
    victim = address_of(hosts, fault.role)
    with Watcher(hosts) as watcher:
        replies = [hosts.client.submit(hosts.get, f"{burst.path}&_={fault.name}-{i}", 2 * burst.bound_s)
                   for i in range(burst.requests)]  # fmt: skip
        _wait_running(hosts)
        struck = time.time()
        fault.inject(hosts.net, fault.role)
        time.sleep(fault.hold_s)
        if fault.restore is not None:
            fault.restore(hosts.net, fault.role)
        undone = time.time()
        again = hosts.client.submit(_serves_again, hosts, undone)  # meanwhile the burst ends
        answers = [reply.result() for reply in replies]
        whole = watcher.wait(undone, lambda _, workers: _whole(workers), RECOVERY_S)
        serves_again_s, probe_s = again.result()
    row = {"fault": fault.name, "what": fault.what, "host": fault.role, "hold_s": fault.hold_s,
           **account(answers, burst), "serves_again_s": serves_again_s, "probe_s": probe_s,
           "whole_again_s": whole}  # fmt: skip
    row.update(_noticed(watcher, fault, victim, struck))
    row["timeline"] = watcher.changes(struck, victim)
    return row


def _wait_running(hosts: HostCluster, timeout: float = 30.0) -> None:
    """Until the lab has handed the cluster a task (the burst is under way)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = hosts.get("/stats", 5)
        if reply.status == 200 and any(p["pools"]["distributed"]["running"] for p in reply.body["processes"]):
            return
        time.sleep(0.05)


def _serves_again(hosts: HostCluster, since: float) -> tuple[float | None, float | None]:
    """From `since`, a tiny task at a time (the next POLL_S after an answer): when the first one answered 200
    was sent, in seconds from `since`, and how long it took; (None, None) if none within RECOVERY_S."""
    for probe in range(int(RECOVERY_S / POLL_S)):
        if time.time() - since > RECOVERY_S:
            break
        reply = hosts.get(f"/distributed/sleep?seconds=0&_=probe{probe}", RECOVERY_S)
        if reply.status == 200:
            return round(max(0.0, reply.sent - since), 2), round(reply.seconds, 2)
        time.sleep(POLL_S)
    return None, None


def _whole(workers: dict[str, float]) -> bool:
    """Every worker host has a worker listed, and none of them is quiet."""
    return len(workers) == len(WORKERS) and all(quiet < QUIET_S for quiet in workers.values())


def _noticed(watcher: Watcher, fault: Fault, victim: str | None, struck: float) -> dict[str, Any]:
    """When the lab (`lab_noticed_s`) and the scheduler (`dropped_s`) saw the fault, from the /stats samples."""
    if fault.role == "sched":
        return {"lab_noticed_s": watcher.first(struck, lambda state, _: state == "disconnected"),
                "dropped_s": watcher.first(struck, lambda _, workers: len(workers) < len(WORKERS))}  # fmt: skip
    return {
        "lab_noticed_s": watcher.first(struck, lambda _, workers: workers.get(str(victim), QUIET_S) >= QUIET_S),
        "dropped_s": watcher.first(struck, lambda _, workers: str(victim) not in workers),
    }


def account(replies: list[Reply], burst: Burst) -> dict[str, Any]:
    """What the requests got: every one counted once; `unaccounted` got no answer; `late` took past the bound."""
    kinds: Counter[str] = Counter()
    for reply in replies:
        if reply.status == 503:
            kinds["503_retry_after" if reply.headers.get("Retry-After") else "503_bare"] += 1
        else:
            kinds[{0: "unaccounted", 200: "200", 504: "504"}.get(reply.status, "other")] += 1
    messages = Counter(str(r.body.get("error", {}).get("message", ""))[:120] for r in replies
                       if r.status != 200 and isinstance(r.body, dict))  # fmt: skip
    return {
        "sent": len(replies),
        "ok": kinds["200"],
        "retry_after": kinds["503_retry_after"],
        "bare_503": kinds["503_bare"],
        "timeouts_504": kinds["504"],
        "other": kinds["other"],
        "unaccounted": kinds["unaccounted"],
        "late": sum(reply.seconds > burst.bound_s for reply in replies),
        "longest_s": round(max(reply.seconds for reply in replies), 2),
        "bound_s": burst.bound_s,
        "errors": dict(messages.most_common(4)),
    }
