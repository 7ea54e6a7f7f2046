"""Native (BLAS/OpenMP) thread pools: capped to one thread before numpy is first imported."""

from __future__ import annotations

import os

# Each library sizes its pool from one of these when it loads.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def cap_native_threads() -> None:
    """One BLAS/OpenMP thread per process or thread unless the user chose otherwise.

    Otherwise every pool worker and every thread would start one BLAS thread
    per core: 2 processes x 6 threads x 2 BLAS threads on 2 cores is not a
    fair comparison of the modes. Spawned pool workers inherit the environment.
    Must run before numpy is imported anywhere in the process.
    """
    for var in THREAD_VARS:
        os.environ.setdefault(var, "1")
