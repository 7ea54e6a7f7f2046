"""The open files a burst of concurrent waits needs, and raising this process's limit to it (its children inherit it).

Each waiting /async request holds one socket in the client, one in the
upstream and two in the lab server process that serves it: its client's
connection and its own to the upstream. A forked server (`--processes P`)
shares the waits among its processes, so the busiest process, whichever it
is, holds about max(c, 2 * 1.1 * c / P) files (an uneven share allowed).
"""

from __future__ import annotations

import resource
import sys

SOCKETS_PER_REQUEST = 2  # in the lab server process that serves it
SPARE_FILES = 512  # the interpreter's, the logs', the pools' pipes
# Waits a forked server's processes may hold above an even share (dispatch sends each connection to the
# least busy child; reuseport lets the kernel choose): 1.1 x c/P.
UNEVEN_SHARE = 1.1


def files_needed(concurrency: int, server_processes: int = 1) -> int:
    """Open files the busiest process needs: the client's (one per wait) or a server process's (two per wait)."""
    share = min(concurrency, round(UNEVEN_SHARE * concurrency / server_processes))
    return max(concurrency, SOCKETS_PER_REQUEST * share) + SPARE_FILES


def ensure_open_files(concurrency: int, server_processes: int = 1, *, can_fork: bool = False) -> None:
    """Raise this process's open-files limits for `concurrency` waits (children inherit them), or exit 2 saying how.

    `can_fork`: the caller's lab server takes --processes, so the way out may also be to fork it.
    """
    needed = files_needed(concurrency, server_processes)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, needed))  # allowed as root (CAP_SYS_RESOURCE)
        except (ValueError, OSError):
            fork = _fork_hint(concurrency, server_processes, hard) if can_fork else ""
            print(f"error: {concurrency:,} concurrent waits need {needed:,} open files in the busiest process and the "
                  f"hard limit is {hard:,}: run `ulimit -Hn {needed}` as root (or raise nofile in "
                  f"/etc/security/limits.conf), then run this again{fork}", file=sys.stderr)  # fmt: skip
            raise SystemExit(2) from None
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def _fork_hint(concurrency: int, server_processes: int, hard: int) -> str:
    """The fewest lab processes whose busiest one fits under `hard`, as the flag to give; "" if none would."""
    # files_needed only falls as processes are added, down to the client's one socket a wait.
    fits = (p for p in range(server_processes + 1, 65) if files_needed(concurrency, p) <= hard)
    processes = next(fits, None)
    if processes is None:
        return ""
    return f"; or fork the lab server (--processes {processes}): each process then holds its share"
