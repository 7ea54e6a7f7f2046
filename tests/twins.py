"""A job's twin: a `sleep` process of the job's length, begun just before the job. "Answered (or stopped) before
the job would have ended" is then told by order, the twin still sleeping, and not by a stopwatch bound that a
busy host can break: a loaded machine stretches the twin's sleep no less than the job's."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def twin(seconds: float) -> Iterator[Callable[[], bool]]:
    """A `seconds` sleep begun now; yields whether it is still sleeping. Killed on the way out."""
    process = subprocess.Popen(["sleep", f"{seconds:g}"])
    try:
        yield lambda: process.poll() is None
    finally:
        process.kill()
        process.wait()
