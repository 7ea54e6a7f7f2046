"""Logging set-up shared by the server and the embedded upstream."""

from __future__ import annotations

import logging


def configure(level: int = logging.INFO) -> None:
    # The pid in every line: forked children, pool workers and the upstream interleave.
    logging.basicConfig(
        level=level,
        format="%(asctime)s.%(msecs)03d %(process)d %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
