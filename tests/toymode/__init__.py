"""A mode invented for tests/test_modes.py, shaped as every mode's folder under lab/modes/ is: this entry and a runner.

Kept light as lab/modes/*/__init__.py are (no runner import): the bench reads
an entry without starting anything.
"""

from __future__ import annotations

from lab.modes.contract import Capacity, Facts, Mode


def _capacity(facts: Facts, workload: str) -> Capacity:
    return Capacity(int(facts["toy_pool"]), "as many toys as the pool has")


MODE = Mode(
    "toy",
    "starts a new thread for every request, a few at a time.",
    "threads",
    _capacity,
    runner="tests.toymode.runner.ToyRunner",
    summary="in a toy box",
)
