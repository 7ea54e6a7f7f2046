"""Blocking I/O stand-in: time.sleep releases the GIL while it waits."""

from __future__ import annotations

from workloads import waits


def sleep(seconds: float) -> float:
    """Wait `seconds` without using the CPU (like a blocking socket read), a wait on purpose; return `seconds`."""
    waits.sleep(seconds)
    return seconds


KNOWN_ANSWERS: list[tuple[str, dict[str, float], float]] = [
    ("sleep", {"seconds": 0.0}, 0.0),
    ("sleep", {"seconds": 0.01}, 0.01),
]
