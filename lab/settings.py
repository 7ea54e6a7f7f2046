"""A setting: one command-line flag declared once, with everything --help, Config and the docs say of it.

Each setting lives with what it configures (gunicorn's Setting classes, in
small): the server-wide ones on lab/config.py's Config, each mode's own on its
runner class (`settings`). lab/config.py assembles the parser and Config from
the declarations, so a flag, its default and its help cannot drift apart.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

# Every setting's parsed value, by name: what a cross-flag check reads.
Values = Mapping[str, Any]


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One flag: how its text is parsed, its default, and what --help says of it."""

    flag: str
    # Text to value, raising argparse.ArgumentTypeError with the reason; None: a switch, on or off.
    parse: Callable[[str], T] | None = None
    default: T | None = None
    # Computed when a parser or a Config is built (pool sizes follow the cores).
    default_factory: Callable[[], T] | None = None
    metavar: str | None = None
    # As argparse takes it (%(default)s is the default); a function if it names something only known
    # when the parser is built (the core count).
    help: str | Callable[[], str] = ""
    choices: tuple[str, ...] | None = None
    # Its key in Config (and /stats facts): the flag's words joined by "_" unless given.
    dest: str | None = None
    # What is wrong with this setting's value among all the others (e.g. --debug with --processes 2), or None.
    check: Callable[[Values], str | None] | None = None
    # Given once per value (--allow-host a --allow-host b): its value is a tuple of them, () when not given.
    repeat: bool = False

    @property
    def name(self) -> str:
        return self.dest or self.flag.removeprefix("--").replace("-", "_")

    def default_value(self) -> T | None:
        return self.default_factory() if self.default_factory is not None else self.default

    def help_text(self) -> str:
        return self.help() if callable(self.help) else self.help

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        if self.parse is None:  # a switch: --debug sets True; --no-access-log (default True) sets False
            action = "store_false" if self.default else "store_true"
            parser.add_argument(self.flag, dest=self.name, action=action, help=self.help_text())
            return
        if self.repeat:
            parser.add_argument(
                self.flag, dest=self.name, type=self.parse, action="append", metavar=self.metavar, help=self.help_text()
            )
            return
        parser.add_argument(
            self.flag,
            dest=self.name,
            type=self.parse,
            default=self.default_value(),
            metavar=self.metavar,
            choices=self.choices,
            help=self.help_text(),
        )

    def value(self, parsed: Any) -> Any:
        """What argparse gave, as Config keeps it: a repeated flag's values as a tuple."""
        return tuple(parsed or ()) if self.repeat else parsed

    def problem(self, values: Values) -> str | None:
        return self.check(values) if self.check is not None else None


def choices_help(what: str, choices: Mapping[str, str], tail: str) -> str:
    """`what: a = ...; b = ... (tail)`: a choice flag's help, one clause per choice."""
    return f"{what}: " + "; ".join(f"{name} = {meaning}" for name, meaning in choices.items()) + f" ({tail})"


# ---------- parsers for the kinds of values the lab's flags take ----------


def count(minimum: int) -> Callable[[str], int]:
    """A whole number of at least `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def param_pair(text: str) -> tuple[str, str]:
    """NAME=VALUE (the race's and the bench tools' -p)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value
