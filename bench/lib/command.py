"""How a bench command is put together and how its run ends (its flags are bench/lib/args.py's).

A bench command is a module with a `build_parser()` and a `main(argv)`:

    def build_parser() -> argparse.ArgumentParser:
        parser = new_parser("bench.mine", __doc__)
        URL.add(parser)
        SERVER_ARGS.add(parser, help="flags for the server started when --url is not given")
        PARAM.add(parser, help="workload param, repeatable")
        CONCURRENCY.add(parser, help="simultaneous requests (default: 10)")
        parser.add_argument("--mine", ...)  # a flag of its own
        return parser

    def main(argv: Sequence[str] | None = None) -> int:
        parser = build_parser()
        args = parser.parse_args(argv)
        check_ranges(parser, ("-c", args.concurrency, 1, 200))  # exit 2: "-c must be between 1 and 200"
        return run_command(lambda: measure(args))  # 0; 1 with `error: ...`; 130 on Ctrl-C or SIGTERM

    def measure(args: argparse.Namespace) -> None:
        with lab_server(args.url, args.server_args, "mine-") as base:  # bench/lib/servers.py: --url's, or its own
            ...
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from types import FrameType

# What a run reports in one line instead of a traceback: a server that would not start or answer
# (ServerError, StepError and other RuntimeErrors), a refused or reset connection, a file not written.
ERRORS = (RuntimeError, OSError)


def new_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """A command's parser: `python -m <module>` in its usage, its module docstring (as written) in its help."""
    return argparse.ArgumentParser(
        prog=f"python -m {module}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def check_ranges(parser: argparse.ArgumentParser, *checks: tuple[str, int, int, int]) -> None:
    """Each (flag, value, low, high): a value outside its range is a usage error (exit 2) naming the flag."""
    for name, value, low, high in checks:
        if not low <= value <= high:
            parser.error(f"{name} must be between {low} and {high}")


def stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so a server this run started is stopped on the way out."""

    def leave(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, leave)


def run_command(
    work: Callable[[], int | None],
    *,
    interrupted: str = "interrupted",
    on_error: Callable[[str], None] | None = None,
    sigterm: bool = True,
) -> int:
    """Run a command's work; its exit status: what `work` returns (None: 0), 1 after an error, 130 after Ctrl-C.

    An error (ERRORS) is one line on stderr, `error: ...`, which `on_error`
    sees first; Ctrl-C prints `interrupted` (or the command's own words).
    With `sigterm`, SIGTERM unwinds like Ctrl-C from here on.
    """
    if sigterm:
        stop_on_sigterm()
    try:
        return work() or 0
    except ERRORS as error:
        if on_error is not None:
            on_error(str(error))
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\n{interrupted}", file=sys.stderr)
        return 130
