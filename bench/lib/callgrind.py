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

import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from bench.lib.ab import ab_batch
from bench.lib.optional import need_program

INSTALL = "sudo apt-get install valgrind (or make system-deps)"

T = TypeVar("T")

CONTROL_TIMEOUT_S = 60.0  # callgrind_control waits for the program to reach a point where it can answer


def need_valgrind(tool: str) -> None:
    """valgrind and its callgrind_control on PATH; exit 2 with the install command when either is missing."""
    for program in ("valgrind", "callgrind_control"):
        need_program(program, INSTALL, tool=tool)


def valgrind_prefix(folder: Path, name: str) -> list[str]:
    """The command put before a server's Python: callgrind, counting nothing until told to (start-up is not
    counted), its dumps in `folder` as `name`.<pid>.<n>."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={folder / name}.%p"]


class Counted:
    """A server process running under callgrind (valgrind_prefix), driven with callgrind_control."""

    def __init__(self, pid: int, folder: Path, name: str) -> None:
        self.pid = pid
        self._dumps = f"{name}.{pid}.*"
        self._folder = folder
        self._control("-i", "on")

    def _control(self, *flags: str) -> None:
        command = ["callgrind_control", *flags, str(self.pid)]
        try:
            done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=CONTROL_TIMEOUT_S, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{shlex.join(command)} had no answer in {CONTROL_TIMEOUT_S:g} s") from None
        said = (done.stdout + done.stderr).strip()
        # It exits 0 whether or not it found the run: its words say which.
        if done.returncode != 0 or "Error" in said or "No active callgrind" in said:
            raise RuntimeError(f"{shlex.join(command)}: {said[-300:]}")

    def zero(self) -> float:
        """Count from now on: time.monotonic() once callgrind has zeroed its counts."""
        self._control("-z")
        return time.monotonic()

    def dump(self) -> tuple[int, float]:
        """The instructions counted since the last zero (or dump), every thread's, and time.monotonic() once
        callgrind has written them (to a new file: callgrind_control returns once it is written)."""
        before = set(self._folder.glob(self._dumps))
        self._control("-d")
        ended = time.monotonic()
        for path in set(self._folder.glob(self._dumps)) - before:
            total = summary(path)
            if total is not None:
                return total, ended
        raise RuntimeError(f"callgrind wrote no dump for pid {self.pid}")

    def over(self, work: Callable[[], T]) -> tuple[T, int, float]:
        """`work()`'s result, the instructions counted while it ran, and the seconds they were counted over (from
        the zero's return to the dump's: the same way for a quiet spell and a batch)."""
        began = self.zero()
        result = work()
        total, ended = self.dump()
        return result, total, ended - began


def summary(path: Path) -> int | None:
    """The instructions a callgrind dump counted, its `summary:` line (what callgrind_annotate reads; its
    `totals:` can include what ran before a zero), None if it has none."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("summary:"):
            return int(line.split()[1])
    return None


def per_request(
    counted: Counted, url: str, *, concurrency: int, requests: int, seconds: int, timeout: float
) -> dict[str, Any]:
    """`requests` requests of ab (keep-alive) at `url`, every one answered: the server's instructions a request,
    its idle rate taken off.

    The idle rate is counted over `seconds` with nothing sent before the batch and again after it, and the lower
    of the two taken: the first can catch the end of what came before (a floor, which has no timers, once read
    3.3 million a second there and 0.03 million the next round). Taking it off assumes the lab's own timers
    (its GIL meter, its /stats board) do under load what they do idle.
    """

    def quiet() -> None:
        time.sleep(seconds)

    _, idle, idle_s = counted.over(quiet)
    batch, total, elapsed = counted.over(
        lambda: ab_batch(url, concurrency=concurrency, seconds=seconds, timeout=timeout, requests=requests)
    )
    _, after, after_s = counted.over(quiet)
    idle_per_s = min(idle / idle_s, after / after_s)
    n = batch.requests
    return {
        "requests": n,
        "failed": batch.failed,
        "k_instructions": round((total - idle_per_s * elapsed) / n / 1000, 1) if n else None,
        "idle_k_per_s": round(idle_per_s / 1000, 1),
        "idle_share": round(idle_per_s * elapsed / total, 3) if total else None,
    }
