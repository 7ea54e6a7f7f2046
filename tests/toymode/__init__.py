"""A mode invented for tests/test_modes.py, shaped as every mode's folder under lab/modes/ is: this entry and a runner.

Kept light as lab/modes/*/__init__.py are (its runner imported only in runner()): the bench reads
an entry without starting anything.
"""

from __future__ import annotations

from lab.modes.contract import Capacity, Facts, Mode, RunnerFactory


def _capacity(facts: Facts, workload: str) -> Capacity:
    return Capacity(int(facts["toy_pool"]), "as many toys as the pool has")


def runner() -> RunnerFactory:
    """The runner class, imported when a server builds its runners (the bench reads this entry without it)."""
    from tests.toymode.runner import ToyRunner

    return ToyRunner


MODE = Mode(
    "toy",
    "starts a new thread for every request, a few at a time.",
    "threads",
    _capacity,
    runner=runner,
    summary="in a toy box",
)
