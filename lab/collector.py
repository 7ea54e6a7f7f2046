"""The cyclic garbage collector, set for a server process that holds thousands of requests at once.

A crowd of waits (bench.crowd: 5,000 /async?delay=1 at once) keeps every
request's objects alive for a second. With CPython's default thresholds
(700, 10, 10) they all reach the oldest generation while they wait, and a
full collection walks every one of them: a server process measured about
eight full collections per burst, 1.2 s of the 2.9 s its event loop worked
(docs/results.md#crowd). A full collection waits for ten collections of the
middle generation, each of which waits for ten of the youngest: collecting
the youngest every 10,000 allocations instead of 700 makes that at most one
per million allocations instead of one per 70,000 (such a burst makes about
750,000), and every younger collection 14 times rarer.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000  # allocations between collections of the youngest generation (CPython: 700)


def settle() -> None:
    """Freeze what start-up built (it lives as long as the process); collect the youngest generation less often.

    Call once start-up is over: numpy, scikit-learn and the app are frozen,
    so a full collection walks a burst's own objects only. (Not scikit-learn
    in a lazy server, server.py --lazy-ml: imported later, its objects stay
    in the collector's view, about 75,000 of them, a few tens of ms a full
    collection.)
    """
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
