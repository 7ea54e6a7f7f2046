"""Pure-Python CPU work: both functions hold the GIL for their whole run."""

from __future__ import annotations


def count(n: int) -> int:
    """The classic counting loop: n increments of a Python int."""
    i = 0
    while i < n:
        i += 1
    return i


def fib(n: int) -> int:
    """Naive recursive Fibonacci: about 1.6**n Python calls."""
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


# (workload, params, expected result): the tests parametrize over these.
KNOWN_ANSWERS: list[tuple[str, dict[str, int], int]] = [
    ("count", {"n": 0}, 0),
    ("count", {"n": 1}, 1),
    ("count", {"n": 12345}, 12345),
    ("fib", {"n": 1}, 1),
    ("fib", {"n": 2}, 1),
    ("fib", {"n": 10}, 55),
    ("fib", {"n": 20}, 6765),
    ("fib", {"n": 25}, 75025),
]
