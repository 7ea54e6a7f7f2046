"""Per-process statistics, shared by all forked children through one memory board.

The board is an anonymous shared mmap created by the parent *before* the
fork, one slot per task id, so every child can read every other child's
latest numbers without a broker process, a file or a lock. Each slot has one
writer (the child with that task id) and is guarded by a sequence counter
(a seqlock): the writer makes the counter odd, writes, makes it even again;
a reader retries until it sees the same even value before and after, and the
payload's checksum matches. A child killed mid-write leaves an odd counter,
which readers report as a torn slot (after READ_PATIENCE_S) instead of
blocking on a lock nobody will release. A replacement child takes
over its predecessor's slot, so its restart is visible and the task's
totals survive it.

Why not prometheus_client's multiprocess mode: it aggregates counters and
gauges well but keeps one file per pid and cannot carry the lists /stats
shows (busy workers, their pids). /metrics is this board in Prometheus's
text format instead (handlers/metrics.py), so every child answers for all.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import mmap
import struct
import time
import zlib
from typing import Any

# Upper bounds (seconds) of the request-latency histogram's buckets; the last bucket is +Inf.
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

SLOT_BYTES = 64 * 1024
# A slot: its sequence counter, its payload's length and CRC-32, then the payload. The writer stores them
# in this order: the counter odd, the payload, the length and checksum, the counter even. A reader trusts a
# payload only if the counter was the same even value before and after it, and the checksum matches: the
# counter alone relies on the stores being seen in order from another process, which x86 promises and
# ARM does not.
_SEQ = struct.Struct("<Q")
_CHECK = struct.Struct("<II")  # length, CRC-32
_PAYLOAD_AT = _SEQ.size + _CHECK.size
# How long a reader waits for a slot being written before it calls it torn: a writer descheduled mid-write
# on a busy host holds it for a time slice or two (milliseconds); one killed mid-write, for ever.
READ_PATIENCE_S = 0.05


class Board:
    """Fixed slots of JSON in shared memory; create before forking."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        # mmap(-1, ...) is MAP_SHARED | MAP_ANONYMOUS: forked children share it.
        self._mem = mmap.mmap(-1, slots * SLOT_BYTES)

    def write(self, slot: int, doc: dict[str, Any]) -> None:
        payload = json.dumps(doc, separators=(",", ":")).encode()
        if len(payload) > SLOT_BYTES - _PAYLOAD_AT:
            raise ValueError(f"stats document of {len(payload)} bytes does not fit a slot")
        base = slot * SLOT_BYTES
        seq = _SEQ.unpack_from(self._mem, base)[0]
        seq += seq & 1  # a writer killed mid-write left it odd: start from the next even value
        self._put(base, _SEQ.pack(seq + 1))  # odd: writing
        self._put(base + _PAYLOAD_AT, payload)
        self._put(base + _SEQ.size, _CHECK.pack(len(payload), zlib.crc32(payload)))
        self._put(base, _SEQ.pack(seq + 2))  # even: done

    def _put(self, at: int, data: bytes) -> None:
        # A copy of bytes packed beforehand: struct.pack_into zero-fills its destination before it packs,
        # and a reader in another process caught the counter at 0 (never written) about once in 200 reads
        # beside a writer in a loop.
        self._mem[at : at + len(data)] = data

    def read(self, slot: int, patience_s: float = READ_PATIENCE_S) -> dict[str, Any] | None:
        """The slot's last complete document; None if never written, or torn for `patience_s`."""
        base = slot * SLOT_BYTES
        deadline = time.monotonic() + patience_s
        while True:
            seq = _SEQ.unpack_from(self._mem, base)[0]
            if seq == 0:
                return None
            if seq % 2 == 0:
                length, crc = _CHECK.unpack_from(self._mem, base + _SEQ.size)
                payload = self._mem[base + _PAYLOAD_AT : base + _PAYLOAD_AT + min(length, SLOT_BYTES - _PAYLOAD_AT)]
                if _SEQ.unpack_from(self._mem, base)[0] == seq and zlib.crc32(payload) == crc:
                    with contextlib.suppress(ValueError):  # (a checksum that matched by chance)
                        doc: dict[str, Any] = json.loads(payload)
                        return doc
            if time.monotonic() > deadline:
                return None
            time.sleep(0)

    def docs(self) -> list[dict[str, Any]]:
        """Every slot's last complete document (never-written and torn slots left out)."""
        return [doc for slot in range(self.slots) if (doc := self.read(slot))]


def _empty() -> dict[str, Any]:
    # statuses: HTTP status (as text) -> requests; buckets: requests per LATENCY_BUCKETS_S bucket, +Inf last;
    # run_cpu_ms over timed: the CPU time of the runs that reported one (a burst's own ideal, lab/race/ideal.py).
    return {"count": 0, "errors": 0, "total_ms": 0.0, "max_ms": 0.0, "statuses": {},
            "buckets": [0] * (len(LATENCY_BUCKETS_S) + 1), "run_cpu_ms": 0.0, "timed": 0}  # fmt: skip


class RequestStats:
    """Requests, errors, statuses and latency per mode for this process."""

    def __init__(self, previous: dict[str, Any] | None = None) -> None:
        self.modes: dict[str, dict[str, Any]] = previous or {}

    def record(self, mode: str, status: int, seconds: float, cpu: float | None = None) -> None:
        """A request of `mode` ended with `status` after `seconds`; `cpu`: its run's CPU seconds, if it ran one."""
        entry = self.modes.get(mode)
        if entry is None:
            entry = self.modes[mode] = _empty()
        if cpu is not None:
            entry["run_cpu_ms"] += cpu * 1000
            entry["timed"] += 1
        ms = seconds * 1000
        entry["count"] += 1
        entry["errors"] += status >= 400
        entry["total_ms"] += ms
        entry["max_ms"] = max(entry["max_ms"], ms)
        statuses = entry["statuses"]
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        entry["buckets"][bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1


def summarise(modes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """count/errors/statuses/mean_ms/max_ms per mode from the raw sums."""
    return {
        mode: {
            "count": int(e["count"]),
            "errors": int(e["errors"]),
            "statuses": dict(sorted(e["statuses"].items())),
            "mean_ms": round(e["total_ms"] / e["count"], 3) if e["count"] else 0.0,
            "max_ms": round(e["max_ms"], 3),
            "timed": int(e["timed"]),
            "run_cpu_s": round(e["run_cpu_ms"] / 1000, 6),
        }
        for mode, e in sorted(modes.items())
    }


def merge(docs: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Add raw per-mode sums of several processes together."""
    total: dict[str, dict[str, Any]] = {}
    for modes in docs:
        for mode, e in modes.items():
            t = total.setdefault(mode, _empty())
            t["count"] += e["count"]
            t["errors"] += e["errors"]
            t["total_ms"] += e["total_ms"]
            t["max_ms"] = max(t["max_ms"], e["max_ms"])
            t["run_cpu_ms"] += e["run_cpu_ms"]
            t["timed"] += e["timed"]
            for status, n in e["statuses"].items():
                t["statuses"][status] = t["statuses"].get(status, 0) + n
            t["buckets"] = [a + b for a, b in zip(t["buckets"], e["buckets"], strict=True)]
    return total
