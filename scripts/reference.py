"""docs/api.md's reference tables, generated from the code so that page and code cannot drift apart.

    python -m scripts.reference           # rewrite the generated tables in docs/api.md (make docs)
    python -m scripts.reference --check   # exit 1, naming the table, if docs/api.md and the code differ

Three tables, each between a BEGIN and an END marker in docs/api.md:
routes   every handler module's `routes` (handlers/routes.py) with its handler's
         docstring, and one row per mode of the registry (lab/modes/registry.py) for the
         /{mode} route
workloads the workload registry (workloads/registry.py): params, limits, GIL
flags    server.py's parser (lab.config.build_parser), as `--help` prints it on
         a 2-core machine; what follows the core count is marked
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from tornado.web import RequestHandler
from tornado.websocket import WebSocketHandler

ROOT = Path(__file__).resolve().parent.parent
API = ROOT / "docs" / "api.md"
SHOWN_CORES = 2
METHODS = ("get", "head", "post", "put", "delete", "patch", "options")
GROUP = re.compile(r"\((?!\?:)[^()]*\)")


def cell(text: str) -> str:
    """Text fit for one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def doc_line(obj: object) -> str:
    """The first sentence-line of an object's own docstring, without a leading 'GET /path:'."""
    doc = inspect.getdoc(obj) if obj.__doc__ else None
    if not doc:
        raise ValueError(f"{obj!r} has no docstring: the routes table takes its words from there")
    line = re.sub(r"^(?:[A-Z]+ )?/\S*: ", "", doc.splitlines()[0])
    return line[:1].upper() + line[1:]


def readable(pattern: str, handler: type[RequestHandler]) -> str:
    """A route pattern as people write it: r"/static/([^/]+)" -> /static/{name} (the handler's own argument names)."""
    names = iter([p for p in inspect.signature(handler.get).parameters if p != "self"] + ["arg"] * 5)
    path = pattern.removesuffix("$").removesuffix("/?") or "/"
    return GROUP.sub(lambda _: "{" + next(names) + "}", path)


def methods(handler: type[RequestHandler]) -> str:
    if issubclass(handler, WebSocketHandler):
        return "WS"
    found = [m.upper() for m in METHODS if getattr(handler, m) is not getattr(RequestHandler, m)]
    return ", ".join(found)


def number(value: object) -> str:
    """20000000 -> 20,000,000; 1.0 -> 1.0: as people read limits."""
    return f"{value:,}" if isinstance(value, int) else str(value)


def _param_words(params: Sequence[Any]) -> str:
    words = []
    for p in params:
        limits = f"{number(p.min)}–{number(p.max)}" if hasattr(p, "min") else ", ".join(p.choices)
        words.append(f"`{p.name}` ({number(p.default)}; {limits})")
    return ", ".join(words)


def routes_table() -> str:
    from handlers.routes import MODULES  # noqa: PLC0415 -- the app's imports, only when the table is made
    from lab.modes.registry import MODES  # noqa: PLC0415

    rows = []
    for module in MODULES:
        for pattern, handler in module.routes:
            path = readable(pattern, handler)
            if path.startswith("/{") or path.strip("/") in MODES:
                continue  # /{mode}[/{workload}]: one row per mode below, from the registry
            rows.append((methods(handler), f"`{path}`", doc_line(handler)))
    for mode in MODES.values():
        path = f"/{mode.name}[/{{workload}}]" if mode.runs_workloads else f"/{mode.name}"
        what = f"{mode.name} mode: {mode.why}"
        if mode.params:
            what += f" Params: {_param_words(mode.params)}."
        rows.append(("GET", f"`{path}`", what))
        if mode.awaits:
            awaited = ", ".join(f"`{name}`" for name in mode.awaits)
            rows.append(("GET", f"`/{mode.name}/{{workload}}`", f"{mode.name} mode, awaiting a workload written to be "
                         f"awaited ({awaited}) on the event loop: its computing on the loop's thread, its waits "
                         "awaited together with every other request's. Params: the workload's."))  # fmt: skip
    lines = ["| method | route | what it does |", "|---|---|---|"]
    return "\n".join([*lines, *(f"| {m} | {p} | {cell(w)} |" for m, p, w in rows)])


def workloads_table() -> str:
    from lab.modes.registry import MODES  # noqa: PLC0415
    from workloads.registry import WORKLOADS  # noqa: PLC0415

    lines = ["| workload | params (default; range) | GIL | needs | what it is |", "|---|---|---|---|---|"]
    for w in WORKLOADS.values():
        gil = "waits, released" if w.waits else "released" if w.releases_gil else "held"
        refusing = [f"`/{m.name}`" for m in MODES.values() if m.refusal(w.name, w.needs)]
        needs = ", ".join(w.needs) + (f" (not in {', '.join(refusing)})" if refusing else "") if w.needs else "–"
        lines.append(f"| `{w.name}` | {_param_words(w.params)} | {gil} | {needs} | {cell(w.description)} |")
    return "\n".join(lines)


@contextmanager
def cores(count: int) -> Iterator[None]:
    """The machine as `count` cores, for whatever reads the core count meanwhile."""
    with mock.patch.object(os, "sched_getaffinity", lambda pid: set(range(count)), create=True), \
            mock.patch.object(os, "cpu_count", lambda: count):  # fmt: skip
        yield


def _flag_rows(build: Callable[[], argparse.ArgumentParser]) -> list[tuple[str, str, str]]:
    parser = build()
    rows = []
    for action in parser._actions:  # argparse keeps no public list of its actions
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        flag = ", ".join(action.option_strings)
        if action.nargs != 0:
            flag += " " + ("{" + ",".join(map(str, action.choices)) + "}" if action.choices else
                           str(action.metavar or action.dest.upper()))  # fmt: skip
        default = "off" if action.nargs == 0 else "–" if action.default is None else str(action.default)
        if isinstance(action.default, Path):
            default = str(action.default.relative_to(ROOT)) if action.default.is_relative_to(ROOT) else default
        what = (action.help or "") % {**vars(action), "prog": parser.prog}
        rows.append((flag, default, what.replace(str(ROOT) + "/", "")))
    return rows


def flags_table() -> str:
    from lab.config import build_parser  # noqa: PLC0415

    with cores(SHOWN_CORES):
        shown = _flag_rows(build_parser)
    with cores(SHOWN_CORES + 1):
        other = _flag_rows(build_parser)
    lines = ["| flag | default | what it does |", "|---|---|---|"]
    for (flag, default, what), (_, other_default, other_what) in zip(shown, other, strict=True):
        mark = " ¹" if default != other_default else ""
        note = " ¹" if what != other_what and not mark else ""
        lines.append(f"| `{flag}` | {cell(default)}{mark} | {cell(what)}{note} |")
    lines += ["", f"¹ Follows the machine's core count; shown for {SHOWN_CORES} cores, as `--help` prints it there."]
    return "\n".join(lines)


TABLES: dict[str, Callable[[], str]] = {"routes": routes_table, "workloads": workloads_table, "flags": flags_table}


def block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- BEGIN {name}: generated by `make docs`, do not edit -->\n)(.*?)(<!-- END {name} -->)",
                      re.DOTALL)  # fmt: skip


def where(text: str, name: str) -> tuple[int, int]:
    """Where the table `name` sits in `text` (docs/api.md), between its markers."""
    found = block(name).search(text)
    if found is None:
        raise ValueError(f"docs/api.md has no '{name}' table (its BEGIN and END markers)")
    return found.start(2), found.end(2)


def generated(text: str, name: str) -> str:
    """The table `name` as `text` has it now."""
    start, end = where(text, name)
    return text[start:end]


def render(text: str) -> str:
    """`text` with every generated table made afresh from the code."""
    for name, make in TABLES.items():
        start, end = where(text, name)
        text = text[:start] + make() + "\n" + text[end:]
    return text


def stale(text: str) -> list[str]:
    """The names of the tables whose text differs from what the code makes now."""
    fresh = render(text)
    return [name for name in TABLES if generated(text, name) != generated(fresh, name)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.reference", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if a table is stale")
    args = parser.parse_args(argv)
    text = API.read_text()
    try:
        render(text)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.check:
        names = stale(text)
        if names:
            print(f"docs/api.md is stale ({', '.join(names)}): run make docs", file=sys.stderr)
        return 1 if names else 0
    API.write_text(render(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
