"""ApacheBench (`ab`) as the bench's C load generator: a batch of requests for some seconds, read back as numbers.

A Python client spends about as much CPU per request as a tiny Tornado
handler does, on the same two cores: the load generator would be what is
measured. ab is one C process with one epoll loop, a few microseconds a
request, and it says so: `client_cpu_share` is its own CPU time over the
batch's wall time (near 1.0 would mean the client, not the server, was the
limit).

    batch = ab_batch("http://127.0.0.1:8000/ping", concurrency=10, seconds=2)   # keep-alive
    batch = ab_batch(url, concurrency=10, seconds=2, keep_alive=False, head=True)  # a connection each
"""

from __future__ import annotations

import re
import resource
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.lib.optional import need_program

INSTALL = "sudo apt-get install apache2-utils (or make system-deps)"
# ab stops at whichever comes first, the time limit or this many requests (its own default with -t is 50,000).
MAX_REQUESTS = 10_000_000


@dataclass(frozen=True)
class Batch:
    """One ab run: what it sent, what came back, how long it took, what it cost the client."""

    requests: int
    failed: int  # no answer or a broken one (ab's Connect, Receive and Exceptions), plus any status outside 2xx
    seconds: float
    client_cpu_s: float
    p50_ms: float | None
    p99_ms: float | None

    @property
    def us_per_request(self) -> float:
        """Wall time per request over the batch (ab's "time per request, across all concurrent requests")."""
        return 1e6 * self.seconds / self.requests if self.requests else float("nan")

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0

    @property
    def client_cpu_share(self) -> float:
        return self.client_cpu_s / self.seconds if self.seconds > 0 else 0.0

    def row(self) -> dict[str, Any]:
        return {**asdict(self), "us_per_request": round(self.us_per_request, 1), "per_second": round(self.per_second),
                "client_cpu_share": round(self.client_cpu_share, 3)}  # fmt: skip


def need_ab(tool: str) -> str:
    """The path of `ab`; exit 2 with the install command when it is missing."""
    return need_program("ab", INSTALL, tool=tool)


def ab_batch(
    url: str,
    *,
    concurrency: int,
    seconds: int,
    keep_alive: bool = True,
    head: bool = False,
    timeout: float = 60,
    requests: int | None = None,
) -> Batch:
    """Requests to `url` from `concurrency` connections at once for `seconds` (keep-alive, or a connection each).

    Whole seconds: ab reads its time limit as an integer (0 would be none at all). `requests`: that many, every
    one answered, however long they take (at a time limit ab leaves up to `concurrency` sent and unanswered,
    which the server still serves); `seconds` is then how long they are expected to take, and ab is given
    twenty times that.
    """
    if seconds < 1:
        raise ValueError("ab's time limit is a whole number of seconds, at least 1")
    limit = ["-t", str(seconds), "-n", str(MAX_REQUESTS)] if requests is None else ["-n", str(requests)]
    flags = ["-q", "-s", f"{timeout:g}", *limit, "-c", str(concurrency)]
    flags += ["-k"] if keep_alive else []
    flags += ["-i"] if head else []
    with tempfile.TemporaryDirectory(prefix="ab-") as folder:
        percentiles = Path(folder) / "percentiles.csv"
        before = _children_cpu()
        done = subprocess.run(["ab", *flags, "-e", str(percentiles), url], capture_output=True, text=True,
                              timeout=seconds * (1 if requests is None else 20) + timeout + 30,
                              check=False)  # fmt: skip
        cpu = _children_cpu() - before
        if done.returncode != 0 or "Complete requests" not in done.stdout:
            raise RuntimeError(f"ab {url} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-300:]}")
        served = _percentiles(percentiles)
    return parse(done.stdout, cpu, served)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _number(pattern: str, text: str, default: float | None = None) -> float:
    match = re.search(pattern, text)
    if match is None:
        if default is None:
            raise RuntimeError(f"ab's report has no {pattern!r}")
        return default
    return float(match.group(1))


def parse(report: str, client_cpu_s: float, served: dict[int, float]) -> Batch:
    """A Batch from ab's report. Its "Length" failures are not failures here: the lab's answers differ in length."""
    broken = sum(
        _number(rf"{kind}: (\d+)", report, 0) for kind in ("Connect", "Receive", "Exceptions")
    )  # (ab counts an answer whose length differs from the first one's as "Length" failed)
    return Batch(
        requests=int(_number(r"Complete requests:\s+(\d+)", report)),
        failed=int(broken + _number(r"Non-2xx responses:\s+(\d+)", report, 0)),
        seconds=_number(r"Time taken for tests:\s+([\d.]+)", report),
        client_cpu_s=round(client_cpu_s, 3),
        p50_ms=served.get(50),
        p99_ms=served.get(99),
    )


def _percentiles(path: Path) -> dict[int, float]:
    """ab -e's table: percent of requests -> milliseconds within which they were served."""
    served: dict[int, float] = {}
    try:
        for line in path.read_text().splitlines()[1:]:
            percent, _, ms = line.partition(",")
            served[int(percent)] = float(ms)
    except (OSError, ValueError):
        return {}
    return served
