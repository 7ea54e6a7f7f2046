"""Server configuration: a frozen dataclass whose fields declare their flags, and the parser built from them.

The server-wide settings are Config's fields, each declared with its flag
(lab/settings.py). Each mode's own settings (--thread-pool, --dask-workers...)
are declared by its runner class and kept in `mode_settings`, read with
`config[SETTING]`; the registry (lab/modes/registry.py) says which runners there are.
`build_parser` lists them all in --help in Config's field order, the modes'
own where `mode_settings` sits.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from lab import ROOT
from lab.database import database_url
from lab.machine import cpu_count
from lab.modes.registry import MODES, mode_settings
from lab.settings import Setting, Values, choices_help, count, seconds
from lab.web.hosts import allowed_host_arg
from workloads.ml import LAZY_ENV

T = TypeVar("T")


# Each --accept policy and what it does, in its help (lab/serve/accept/ says how each works).
POLICIES = {
    "fair": "one at a time, only while a child has room (even spread)",
    "all": "Tornado's own, a child that wakes takes every waiting connection",
    "reuseport": "a socket per child, the kernel hashes connections to them",
    "dispatch": "the parent accepts and hands each connection to the least busy child",
}

DEFAULT_MAX_PENDING = 100
DEFAULT_JOB_TIMEOUT = 60.0
DEFAULT_GRACE = 10.0
# Where the bench writes its runs; GET /compare shows the newest comparison found there.
DEFAULT_RESULTS = ROOT / "bench" / "results"

EPILOG = """examples:
  python server.py                       # http://127.0.0.1:8000, embedded upstream
  python server.py --processes 0         # one forked server per core
  python server.py --port 0              # any free port (printed at start-up)
  curl 'http://127.0.0.1:8000/processing/fib?n=30'"""

_SETTING = "setting"  # where a field keeps its declaration, in its metadata


def declare(setting: Setting[T]) -> T:
    """A Config field declared by `setting`: its default, and the setting itself in the field's metadata."""
    if setting.default_factory is not None:
        return field(default_factory=setting.default_factory, metadata={_SETTING: setting})
    return cast(T, field(default=setting.default, metadata={_SETTING: setting}))


def _url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s)://host[:port] URL")
    return text.rstrip("/")


def _debug_alone(values: Values) -> str | None:
    if values["debug"] and values["processes"] != 1:
        return "--debug needs --processes 1: autoreload cannot restart forked children"
    return None


@dataclass(frozen=True, init=False)
class Config:
    """Everything a server process is told; Config(port=0, thread_pool=2) in a test, parse_args from argv."""

    host: str = declare(
        Setting(
            "--host",
            str,
            "127.0.0.1",
            help="bind address (default: %(default)s, loopback only); 0.0.0.0 listens on every interface, and "
            "requests then need a Host this server answers to: add --allow-host NAME for each name or address "
            "other machines use to reach it",
        )
    )
    allow_host: tuple[str, ...] = declare(
        Setting[Any](
            "--allow-host",
            allowed_host_arg,
            (),
            metavar="NAME",
            repeat=True,
            help="answer requests whose Host is NAME too (repeat for more; .example.com: it and its subdomains; "
            "'*': any, which lets any web page drive the lab through DNS rebinding); always answered: "
            "localhost, 127.0.0.1, [::1] and the --host address, any port",
        )
    )
    port: int = declare(Setting("--port", count(0), 8000, help="port; 0 picks a free one (default: %(default)s)"))
    processes: int = declare(
        Setting(
            "--processes",
            count(0),
            1,
            metavar="N",
            help=lambda: f"forked server processes; 0 = one per CPU core, here {cpu_count()} (default: %(default)s)",
        )
    )
    # Every setting a mode's runner declares, by name (config[THREAD_POOL] reads one).
    mode_settings: Mapping[str, Any] = field(default_factory=dict)
    # The base URL /async calls; None until lab/serve/main.py starts the embedded upstream and fills it in.
    upstream: str | None = declare(
        Setting[str | None](
            "--upstream",
            _url,
            metavar="URL",
            help="base URL /async calls (GET URL/delay?seconds=X); default: start the embedded upstream",
        )
    )
    # Where `page` queries; None until lab/serve/main.py creates the embedded SQLite and fills it in.
    database: str | None = declare(
        Setting[str | None](
            "--database",
            database_url,
            metavar="URL",
            help="PostgreSQL the page workload queries (postgresql://USER@HOST:PORT/DB, psycopg 3; the server "
            "creates and fills its table at start-up); default: a SQLite file the server creates, seeds and removes",
        )
    )
    accept: str = declare(
        Setting(
            "--accept",
            str,
            "dispatch",
            choices=tuple(POLICIES),
            help=choices_help(
                "how forked children share connections", POLICIES, "default: %(default)s; no effect unforked"
            ),
        )
    )
    results: Path = declare(
        Setting(
            "--results",
            Path,
            DEFAULT_RESULTS,
            metavar="DIR",
            help="where the page's peers view (GET /compare) looks for the newest bench/compare.py run "
            "(default: bench/results)",
        )
    )
    access_log: bool = declare(
        Setting(
            "--no-access-log",
            default=True,
            dest="access_log",
            help="no line per request, whatever its status (4xx and 5xx too; /stats and /metrics count them); "
            "the server's own warnings and errors are still logged (without it: one line per request, quoting "
            "at most 200 characters of its URI)",
        )
    )
    lazy_ml: bool = declare(
        Setting(
            "--lazy-ml",
            default=False,
            help=f"no scikit-learn until a predict or train runs: each worker (the server's processes, their pool "
            f"workers, the embedded Dask cluster's) imports it at its first predict or train (about 2 s of CPU) "
            f"and trains the predict model at its first predict (0.6 s), inside that run's time, instead of at "
            f"start-up, where they are three quarters of its CPU (also: {LAZY_ENV}=1 in the environment, which the "
            f"test suite sets)",
        )
    )
    debug: bool = declare(
        Setting(
            "--debug",
            default=False,
            help="tracebacks in error bodies and autoreload (needs --processes 1)",
            check=_debug_alone,
        )
    )
    max_pending: int = declare(
        Setting(
            "--max-pending",
            count(0),
            DEFAULT_MAX_PENDING,
            metavar="N",
            help="jobs that may wait for a busy pool before new ones get 503 (default: %(default)s)",
        )
    )
    job_timeout: float = declare(
        Setting(
            "--job-timeout",
            seconds,
            DEFAULT_JOB_TIMEOUT,
            metavar="S",
            help="pool jobs running longer (from when a worker starts them) get 504; a stuck worker "
            "process is replaced (default: %(default)s)",
        )
    )
    grace: float = declare(
        Setting(
            "--grace",
            seconds,
            DEFAULT_GRACE,
            metavar="S",
            help="on SIGTERM/Ctrl-C, how long in-flight requests may take to finish (default: %(default)s)",
        )
    )

    def __init__(self, **values: Any) -> None:
        """Any field, or any setting a mode's runner declares, by name; the rest take their defaults."""
        declared = {setting.name: setting for setting in mode_settings()}
        owned = dict(values.pop("mode_settings", {}))  # as dataclasses.replace hands them back
        owned |= {name: values.pop(name) for name in list(values) if name in declared}
        unknown = sorted(set(owned) - set(declared))
        for item in fields(self):
            if item.name != "mode_settings":
                object.__setattr__(self, item.name, values.pop(item.name) if item.name in values else _default(item))
        if values or unknown:
            raise TypeError(f"Config has no setting {', '.join([*sorted(values), *unknown])}")
        chosen = {name: owned[name] if name in owned else setting.default_value() for name, setting in declared.items()}
        object.__setattr__(self, "mode_settings", chosen)

    def __getitem__(self, setting: Setting[T]) -> T:
        """The value of a setting a mode's runner declares (config[THREAD_POOL])."""
        return cast(T, self.mode_settings[setting.name])

    @property
    def forked(self) -> bool:
        return self.processes != 1

    @property
    def process_count(self) -> int:
        """How many server processes serve requests (0 means one per core)."""
        return self.processes or cpu_count()


def _default(item: Field[Any]) -> Any:
    return item.default_factory() if item.default_factory is not MISSING else item.default


def settings() -> list[Setting[Any]]:
    """Every setting, in --help's order: Config's fields, with each mode's own where `mode_settings` sits."""
    found: list[Setting[Any]] = []
    for item in fields(Config):
        found += mode_settings() if item.name == "mode_settings" else [item.metadata[_SETTING]]
    return found


def description() -> str:
    """--help's first paragraph: every mode in the registry, in a few words each."""
    modes = ", ".join(f"{mode.summary} (/{mode.name})" for mode in MODES.values())
    return f"Tornado Concurrency Lab: serve the same workloads {modes} and from forked processes (--processes)."


def build_parser() -> argparse.ArgumentParser:
    """server.py's whole command line, from the declarations (the docs' flags table is made from it)."""
    parser = argparse.ArgumentParser(
        prog="server.py",
        description=description(),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for setting in settings():
        setting.add_to(parser)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = build_parser()
    values = vars(parser.parse_args(argv))
    values.update({setting.name: setting.value(values[setting.name]) for setting in settings()})
    for setting in settings():
        problem = setting.problem(values)
        if problem:
            parser.error(problem)
    return Config(**values)
