"""Instructions a request, counted by valgrind's callgrind in the serving process: a measure the host's speed
does not move (bench.overhead's callgrind part).

This host's wall and CPU times move 2x from one minute to the next; the
instructions a server executes for a request do not: two servers of the
same tree, counted at once, agree within 1 %. callgrind runs the server's
Python on a simulated CPU, about 40 times slower, and counts every
instruction of every thread in the process (not its children: a process
pool's workers, the Dask cluster and the upstream are other processes, on
both sides alike). What the process does on its own timers (the lab's GIL
meter, its /stats board) is counted too; it runs by the clock, not by the
request, so its rate while idle is measured beside each batch and taken
off over the batch's seconds. What it does not show: how long an
instruction takes (caches, a wait for the GIL or a core), which the hops
part's times do.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from bench.lib.ab import ab_batch
from bench.lib.optional import need_program

INSTALL = "sudo apt-get install valgrind (or make system-deps)"

CONTROL_TIMEOUT_S = 60.0  # callgrind_control waits for the program to reach a point where it can answer
DUMP_WAIT_S = 30.0


def need_valgrind(tool: str) -> None:
    """valgrind and its callgrind_control on PATH; exit 2 with the install command when either is missing."""
    for program in ("valgrind", "callgrind_control"):
        need_program(program, INSTALL, tool=tool)


def valgrind_prefix(folder: Path, name: str) -> list[str]:
    """The command put before a server's Python: callgrind, counting nothing until told to (start-up is not
    counted, and runs about four times faster than counted code), its dumps in `folder` as `name`.<pid>.<n>."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={folder / name}.%p"]


class Counted:
    """A server process running under callgrind (valgrind_prefix), driven with callgrind_control."""

    def __init__(self, pid: int, folder: Path, name: str) -> None:
        self.pid = pid
        self._dumps = f"{name}.{pid}.*"
        self._folder = folder
        self._control("-i", "on")

    def _control(self, *flags: str) -> None:
        subprocess.run(["callgrind_control", *flags, str(self.pid)], stdin=subprocess.DEVNULL,
                       capture_output=True, check=True, timeout=CONTROL_TIMEOUT_S)  # fmt: skip

    def zero(self) -> None:
        self._control("-z")

    def dump(self) -> int:
        """The instructions counted since the last zero (or dump), every thread's: callgrind writes them to a new
        file, whose last lines hold the totals."""
        before = set(self._folder.glob(self._dumps))
        self._control("-d")
        deadline = time.monotonic() + DUMP_WAIT_S
        while time.monotonic() < deadline:
            for path in set(self._folder.glob(self._dumps)) - before:
                total = totals(path)
                if total is not None:
                    return total
            time.sleep(0.05)
        raise RuntimeError(f"callgrind wrote no dump for pid {self.pid} in {DUMP_WAIT_S:g} s")


def totals(path: Path) -> int | None:
    """The instructions a callgrind dump counted (its `totals:` or `summary:` line), None if not written yet."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    return None


def idle_rate(counted: Counted, seconds: int) -> float:
    """Instructions a second the server executes over `seconds` with nothing sent."""
    counted.zero()
    time.sleep(seconds)
    return counted.dump() / seconds


def per_request(counted: Counted, url: str, *, concurrency: int, seconds: int, timeout: float) -> dict[str, Any]:
    """One batch of ab (keep-alive) at `url`: the server's instructions a request, its idle rate taken off.

    The idle rate is counted over `seconds` with nothing sent before the batch and again after it, and the lower
    of the two taken: the first can catch the end of what came before (a floor, which has no timers, once read
    3.3 million a second there and 0.03 million the next round).
    """
    before = idle_rate(counted, seconds)
    counted.zero()
    began = time.monotonic()
    batch = ab_batch(url, concurrency=concurrency, seconds=seconds, timeout=timeout)
    elapsed = time.monotonic() - began
    total = counted.dump()
    idle_per_s = min(before, idle_rate(counted, seconds))
    n = batch.requests
    return {
        "requests": n,
        "failed": batch.failed,
        "k_instructions": round((total - idle_per_s * elapsed) / n / 1000, 1) if n else None,
        "idle_k_per_s": round(idle_per_s / 1000, 1),
        "idle_share": round(idle_per_s * elapsed / total, 3) if total else None,
    }
