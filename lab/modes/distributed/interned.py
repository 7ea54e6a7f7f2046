"""Settle CPython's table of interned strings at start-up, in the Dask processes that msgpack feeds task keys.

CPython keeps every interned string in one dict: the names of all the code
a process has imported, and each map key that msgpack unpacks (it interns
them), so the key of every task a Dask worker or scheduler is sent. That
dict does not reuse the slot a deleted key leaves: every new key takes a
free slot, and when none is left it rebuilds its table for three times the
keys then alive. A worker starts with about 64,000 names alive (numpy,
scipy, sklearn, Dask) in a table of 2**17 slots, 1.8 MiB; the cluster's
process (scheduler and nannies) with about 31,000 in 2**16 slots. Their
first rebuild, some thousands of tasks in, doubles the table (+1.8 MiB and
+0.9 MiB of RSS, kept), which a soak reads as a rising trend
(docs/results.md#soak); the rebuilds after it keep that size, as the names
alive stay as many. `settle` interns and lets go enough throwaway strings
to use up the free slots of either size, so that first rebuild happens at
start-up.
"""

from __future__ import annotations

import sys

SETTLE_INTERNED = 1 << 17


def immortal() -> bool:
    """Whether this Python keeps every interned string for ever (python/cpython#113993): CPython 3.12 until
    interned strings were made mortal again (a fix backported in August 2024), and free-threaded builds. There the
    throwaway strings would stay: 12 MiB of them, measured on 3.12.1."""
    name = sys.intern("".join(["lab-interned-", str(id(object()))]))  # built at run time: not a code constant
    return sys.getrefcount(name) > 1 << 20  # an immortal's count is pinned near 2**32


def settle() -> None:
    """Make the interned-string table rebuild now, at the size the names alive give it (about 50 ms)."""
    if immortal():
        return
    for number in range(SETTLE_INTERNED):
        sys.intern(f"lab-settle-{number}")  # alive only for this call: its slot is freed, not reused
