"""The embedded Dask cluster's upkeep of what Dask keeps per span (dask/distributed#7977) and per task key.

Each request the lab sends on its own is a Dask computation, and so a span.
The scheduler keeps every span, with the task groups it held, and a worker
adds each span's id to the keys of its cumulative metrics (`digests_total`,
`digests_max`): over a soak's hour of /distributed the cluster's process
grew by 45 MB and its worker by 15. So, every PRUNE_EVERY_S (as periodic
callbacks of Dask's own servers, stopped with them):

- the scheduler forgets the spans none of whose task groups it still has
  (a new task makes a new group and a new span, so such a span can never be
  given a task again), and drops what a worker's heartbeat still reports for
  a span it no longer keeps (Dask looks each one up, and a KeyError makes
  the worker close itself);
- each worker forgets its per-span metric keys (the same metrics, summed
  over spans, go to the scheduler with every heartbeat; nothing of the lab
  reads them).

And one cache: dask.utils.key_split, which names a task's kind from its
key, keeps its answer for each of the last 100,000 keys it was asked about.
The lab gives every request a task key of its own, so the scheduler's
process and each worker kept about 250 bytes more per /distributed request,
some 25 MB each by the 100,000th (a soak's hour grew the cluster's process
1.1 MB). Every PRUNE_EVERY_S, a process whose cache holds more than
KEY_SPLIT_KEEP answers clears it (the answers are recomputed as needed).

lab/modes/distributed/cluster_process.py calls keep_spans_bounded() on its
scheduler; each of its workers imports this module as its nanny's preload,
whose dask_setup() does the worker's part. Only the embedded cluster's: a
cluster of your own keeps what it keeps. The lab's own client splits every
key it submits as well, so the server trims its cache as it submits
(whichever cluster it uses).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dask.utils import key_split
from distributed.spans import CONTEXTS_WITH_SPAN_ID
from tornado.ioloop import PeriodicCallback

PRUNE_EVERY_S = 30.0
KEY_SPLIT_KEEP = 1_000


def every(server: Any, name: str, work: Callable[[], object], seconds: float = PRUNE_EVERY_S) -> None:
    """Run `work` every `seconds` as one of Dask `server`'s periodic callbacks (started now, stopped with it)."""

    def tick() -> None:
        work()

    server.periodic_callbacks[name] = PeriodicCallback(tick, seconds * 1000)
    server.start_periodic_callbacks()  # (starts those not running yet)


def trim_key_split_cache() -> bool:
    """Clear this process's key_split cache if it holds more than KEY_SPLIT_KEEP answers; whether it did."""
    if key_split.cache_info().currsize <= KEY_SPLIT_KEEP:
        return False
    key_split.cache_clear()
    return True


# ---------- the scheduler ----------


def prune_spans(scheduler: Any) -> int:
    """Forget the spans whose task groups the scheduler has forgotten, their children with them; how many."""
    spans = scheduler.extensions.get("spans")
    if spans is None:
        return 0
    live = scheduler.task_groups

    def forgotten(root: Any) -> bool:
        return all(live.get(group.name) is not group for group in root.traverse_groups())

    dropped = {span.id for root in spans.root_spans if forgotten(root) for span in root.traverse_spans()}
    if not dropped:
        return 0
    spans.root_spans = [root for root in spans.root_spans if root.id not in dropped]
    for span_id in dropped:
        spans.spans.pop(span_id, None)
    for index in (spans.spans_search_by_name, spans.spans_search_by_tag):
        for key, members in list(index.items()):
            kept = [span for span in members if span.id not in dropped]
            if kept:
                index[key] = kept
            else:
                del index[key]
    return len(dropped)


def forgive_retired_spans(scheduler: Any) -> None:
    """A worker's heartbeat metrics for a span no longer kept are dropped, not looked up (a KeyError there
    makes the worker close itself)."""
    spans = scheduler.extensions.get("spans")
    if spans is None:
        return
    heartbeat = spans.heartbeat

    def kept_only(ws: Any, data: dict[tuple[Any, ...], float]) -> None:
        heartbeat(ws, {key: value for key, value in data.items() if key[1] in spans.spans})

    spans.heartbeat = kept_only


def keep_spans_bounded(scheduler: Any) -> None:
    """The scheduler's part: stale heartbeats forgiven, and every PRUNE_EVERY_S its forgotten spans pruned and
    its process's key_split cache trimmed."""
    forgive_retired_spans(scheduler)
    every(scheduler, "lab-prune-spans", lambda: prune_spans(scheduler))
    every(scheduler, "lab-trim-key-split", trim_key_split_cache)


# ---------- each worker ----------


def forget_span_metrics(worker: Any) -> int:
    """Drop the worker's cumulative metrics that carry a span's id; how many keys went."""
    dropped = 0
    for table in (worker.digests_total, worker.digests_max):
        for key in [key for key in table if isinstance(key, tuple) and key and key[0] in CONTEXTS_WITH_SPAN_ID]:
            del table[key]
            dropped += 1
    return dropped


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, run in each worker once it has started: the worker's part, and its key_split cache."""
    every(worker, "lab-forget-span-metrics", lambda: forget_span_metrics(worker))
    every(worker, "lab-trim-key-split", trim_key_split_cache)
