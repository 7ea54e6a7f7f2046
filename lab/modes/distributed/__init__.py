"""The distributed mode: a run as a task on a Dask cluster (runner.py, cluster.py, roster.py; what the
workers run: worker.py)."""

from __future__ import annotations

from lab.modes.contract import Capacity, Facts, Mode, RunnerFactory, cores, plural, processes, waits

# Addresses of this machine, as a cluster's workers report their host.
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def capacity(facts: Facts, workload: str) -> Capacity:
    """How many runs of `workload` progress at once in this mode, and why."""
    dask = facts.get("dask") or {}
    workers = dask.get("workers") or []
    if not workers:  # not started yet (the embedded cluster starts on first use): as planned
        threads = local = int(dask.get("threads") or cores(facts))
    else:
        threads = sum(int(w.get("threads") or 0) for w in workers)
        local = sum(int(w.get("threads") or 0) for w in workers if w.get("host") in LOCAL_HOSTS)
    if dask.get("embedded", True):
        # Each forked server process has a cluster of its own, on this machine.
        threads, local = processes(facts) * threads, processes(facts) * local
    # Threads on this machine share its cores; others bring their own.
    lanes = threads if waits(facts, workload) else min(local, cores(facts)) + (threads - local)
    where = "" if local < threads else f" on {plural(cores(facts), 'core')}"
    return Capacity(lanes, f"{plural(lanes, 'Dask worker thread')} can run a task at once{where}")


def runner() -> RunnerFactory:
    """The runner class, imported when a server builds its runners (the bench reads this entry without it)."""
    from lab.modes.distributed.runner import DaskRunner  # noqa: PLC0415

    return DaskRunner


MODE = Mode(
    "distributed",
    "sends it to a Dask cluster as a task: a scheduler hands it to a free worker process, on this machine "
    "or another, each worker with its own GIL. More machines, more cores; each task pays a hop.",
    "cluster",
    capacity,
    runner=runner,
    summary="on a Dask cluster",
)
