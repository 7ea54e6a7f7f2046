"""numpy work: the matrix product runs in BLAS, which releases the GIL."""

from __future__ import annotations

import numpy as np


def matmul(n: int, repeat: int) -> int:
    """Multiply two fixed n x n matrices `repeat` times; return the sum of the product.

    Entries are small integers stored as float64, so every product and sum is
    exact: the answer does not depend on the BLAS build or its thread count.
    """
    rng = np.random.default_rng(0)
    a = rng.integers(0, 10, size=(n, n)).astype(np.float64)
    b = rng.integers(0, 10, size=(n, n)).astype(np.float64)
    product = a @ b
    for _ in range(repeat - 1):
        product = a @ b
    return int(product.sum())


# Checked independently against a pure-Python triple loop in tests/test_workloads.py.
KNOWN_ANSWERS: list[tuple[str, dict[str, int], int]] = [
    ("matmul", {"n": 1, "repeat": 1}, 48),
    ("matmul", {"n": 7, "repeat": 3}, 7411),
    ("matmul", {"n": 40, "repeat": 2}, 1354314),
]
