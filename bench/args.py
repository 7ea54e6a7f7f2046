"""What the bench tools' command lines share: NAME=VALUE params and SIGTERM that unwinds like Ctrl-C."""

from __future__ import annotations

import argparse
import signal
from types import FrameType


def param_pair(text: str) -> tuple[str, str]:
    """argparse type for NAME=VALUE (the bench tools' -p)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so a server this run started is stopped on the way out."""

    def leave(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, leave)
