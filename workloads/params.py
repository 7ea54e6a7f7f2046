"""Workload parameters: declared limits and strict parsing of query-string values."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# ASCII digits only: int() would also accept " 5", "5_000" and Arabic-Indic digits, and a
# lab that publishes its limits should say no to anything it did not promise.
_INT_RE = re.compile(r"-?[0-9]{1,30}")
# Plain decimal or scientific notation; "nan", "inf" and hex floats never match.
_FLOAT_RE = re.compile(r"-?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][-+]?[0-9]{1,3})?")

# A query parameter every route ignores, so that a browser (which serialises
# identical URLs) can open two tabs on /blocking?_=1 and /blocking?_=2.
CACHE_BUSTER = "_"


class ParamError(ValueError):
    """A query parameter is unknown, repeated, malformed or out of range."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
        self.message = message


@dataclass(frozen=True)
class IntParam:
    name: str
    default: int
    min: int
    max: int
    help: str

    def parse(self, raw: str) -> int:
        if _INT_RE.fullmatch(raw):
            value = int(raw)
            if self.min <= value <= self.max:
                return value
        raise ParamError(self.name, f"{self.name} must be an integer between {self.min} and {self.max}")

    def describe(self) -> dict[str, Any]:
        return _describe_range(self, "integer")


@dataclass(frozen=True)
class FloatParam:
    name: str
    default: float
    min: float
    max: float
    help: str

    def parse(self, raw: str) -> float:
        if _FLOAT_RE.fullmatch(raw):
            value = float(raw)
            if math.isfinite(value) and self.min <= value <= self.max:
                return value
        raise ParamError(self.name, f"{self.name} must be a number between {self.min:g} and {self.max:g}")

    def describe(self) -> dict[str, Any]:
        return _describe_range(self, "number")


@dataclass(frozen=True)
class ChoiceParam:
    name: str
    default: str
    choices: tuple[str, ...]
    help: str

    def parse(self, raw: str) -> str:
        if raw in self.choices:
            return raw
        raise ParamError(self.name, f"{self.name} must be one of: {', '.join(self.choices)}")

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": "choice",
            "default": self.default,
            "choices": list(self.choices),
            "help": self.help,
        }


Param = IntParam | FloatParam | ChoiceParam


def _describe_range(param: IntParam | FloatParam, kind: str) -> dict[str, Any]:
    return {
        "name": param.name,
        "type": kind,
        "default": param.default,
        "min": param.min,
        "max": param.max,
        "help": param.help,
    }


def parse_params(owner: str, specs: Sequence[Param], query: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """Typed params for `owner` from decoded query arguments, defaults filled in.

    Unknown names are rejected rather than ignored: a typo such as ``?N=5``
    would otherwise silently run the default and mislead a measurement.
    """
    by_name = {spec.name: spec for spec in specs}
    values: dict[str, Any] = {spec.name: spec.default for spec in specs}
    for name, raws in query.items():
        if name == CACHE_BUSTER:
            continue
        spec = by_name.get(name)
        if spec is None:
            allowed = ", ".join(by_name) or "none"
            shown = name if len(name) <= 40 else name[:40] + "…"
            raise ParamError(name, f"unknown parameter {shown!r} for {owner}; allowed: {allowed}")
        if len(raws) != 1:
            raise ParamError(name, f"{name} given {len(raws)} times; give it once")
        values[name] = spec.parse(raws[0])
    return values
