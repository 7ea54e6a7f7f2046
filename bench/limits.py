"""The open files a burst of concurrent waits needs, and raising this process's limit to it (its children inherit it).

Each concurrent /async request holds two sockets in the lab server: the
client's connection and its own to the upstream.
"""

from __future__ import annotations

import resource
import sys

SOCKETS_PER_REQUEST = 2
SPARE_FILES = 512  # the interpreter's, the logs', the pools' pipes


def ensure_open_files(concurrency: int) -> None:
    """Raise this process's open-files limits for `concurrency` waits (children inherit them), or exit 2 saying how."""
    needed = SOCKETS_PER_REQUEST * concurrency + SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, needed))  # allowed as root (CAP_SYS_RESOURCE)
        except (ValueError, OSError):
            print(f"error: {concurrency:,} concurrent waits need {needed:,} open files per process and the hard limit "
                  f"is {hard:,}: "
                  f"run `ulimit -Hn {needed}` as root (or raise nofile in /etc/security/limits.conf), then run "
                  "this again", file=sys.stderr)  # fmt: skip
            raise SystemExit(2) from None
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
