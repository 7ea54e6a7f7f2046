"""Open files as a budget: how many /async waits a process admits, and accepting that pauses when none is left.

A waiting /async request holds its client's socket here and one socket per
upstream call (`fanout` of them), each with its twin in the upstream; idle
keep-alive connections to the upstream hold one here and one there too. A
process that runs out of descriptors fails at whatever opens one next: an
upstream call (which would be the client's 502 for our own exhaustion),
accept() (Tornado's accept handler lets the error escape and logs a
traceback for every turn of the loop while the listen queue stays readable),
a pool's pipe, Dask's monitors. So /async admits each request against a
budget derived from RLIMIT_NOFILE, with RESERVE descriptors kept for
everything else, and answers 503 + Retry-After beyond it; the embedded
upstream serves every forked process, so each process's calls may hold only
its share of the upstream's table. Idle upstream connections count too: they
are a cache, and are closed to make room (and after an idle timeout,
lab/modes/upstream/client.py).

If the table fills anyway (idle keep-alive clients, another mode's load), an
accept that fails for lack of descriptors stops accepting for ACCEPT_PAUSE_S
and logs one warning at most every WARN_EVERY_S: the connections wait in
the kernel's listen queue until descriptors are free.
"""

from __future__ import annotations

import errno
import logging
import math
import resource
import time
from typing import Any

from lab.errors import LabError

log = logging.getLogger(__name__)

# Descriptors kept for what is not an /async wait: the interpreter's and the logs', the pools' pipes,
# a Dask cluster's connections, other modes' clients and the /ping probe. bench/limits.py asks for as many.
RESERVE = 512
# accept() errors that mean "no descriptor (or memory for one) now": wait, do not fail.
OUT_OF_FILES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
ACCEPT_PAUSE_S = 0.1
WARN_EVERY_S = 10.0
RETRY_AFTER_S = 1


def open_files_limit() -> int:
    """This process's soft RLIMIT_NOFILE (an unlimited one counted as a million)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1_000_000 if soft == resource.RLIM_INFINITY else soft


class DescriptorBudget:
    """The descriptors one server process's /async waits may hold: each its client's socket and its calls'."""

    def __init__(self, limit: int, processes: int = 1) -> None:
        self.limit = limit
        self.own = max(0, limit - RESERVE)  # in this process's table
        # In the upstream's table: one embedded upstream serves every forked process.
        self.upstream_share = max(0, (limit - RESERVE) // max(1, processes))
        self.held = 0  # by the waits admitted: 1 + fanout each
        self.calls = 0  # ... of which upstream connections
        self.waits = 0
        self.rejected = 0

    def admit(self, fanout: int, idle: int) -> int:
        """Take a wait of `fanout` calls, or LabError 503; how many of the `idle` connections to close first."""
        cost = 1 + fanout
        if self.held + cost > self.own or self.calls + fanout > self.upstream_share:
            self.rejected += 1
            raise LabError(
                503,
                f"/async is at this server process's descriptor budget: its waits hold {self.held:,} of "
                f"{self.own:,} descriptors, {self.calls:,} of them upstream connections (of "
                f"{self.upstream_share:,}), and this one needs {cost} (open-files limit {self.limit:,}); retry",
                retry_after=RETRY_AFTER_S,
            )
        self.held += cost
        self.calls += fanout
        self.waits += 1
        return max(0, self.held + idle - self.own, self.calls + idle - self.upstream_share)

    def release(self, fanout: int) -> None:
        self.held -= 1 + fanout
        self.calls -= fanout
        self.waits -= 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "open_files_limit": self.limit,
            "budget": self.own,
            "held": self.held,
            "upstream_share": self.upstream_share,
            "upstream_calls": self.calls,
        }


class OutOfFiles:
    """A process out of descriptors: which of accept()'s errors mean "wait", and a warning now and then (a crowd
    would otherwise make it a line a connection)."""

    def __init__(self) -> None:
        self._warned = -math.inf
        self._dropped = 0  # descriptors the kernel dropped since the last warning of them

    def should_pause(self, error: OSError) -> bool:
        """True if `error` means no descriptor is free now (warned about at most every WARN_EVERY_S)."""
        if error.errno not in OUT_OF_FILES:
            return False
        if self._due():
            log.warning(
                "accept: %s (open-files limit %d): not accepting for %g s at a time; connections wait in the "
                "listen queue (warned at most every %g s)",
                error.strerror,
                open_files_limit(),
                ACCEPT_PAUSE_S,
                WARN_EVERY_S,
            )
        return True

    def dropped(self) -> None:
        """A connection handed over whose descriptor the kernel dropped, none being free (MSG_CTRUNC): its
        client sees it close (warned about at most every WARN_EVERY_S, with how many)."""
        self._dropped += 1
        if self._due():
            log.warning(
                "out of file descriptors (open-files limit %d): %d connection(s) the parent handed over lost, their "
                "clients see them close (warned at most every %g s)",
                open_files_limit(),
                self._dropped,
                WARN_EVERY_S,
            )
            self._dropped = 0

    def _due(self) -> bool:
        now = time.monotonic()
        if now - self._warned < WARN_EVERY_S:
            return False
        self._warned = now
        return True
