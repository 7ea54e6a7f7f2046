"""The house's rules, read from the source: imports run downwards and never in a circle, a mode is a folder
that no one else names, records travel whole, tools don't import tools, and the peers load no Tornado.

    handlers/ ──> lab/ ──> workloads/          bench/<tool>.py ──> bench/lib/, bench/charts/ ──> lab/
    peers/app.py ──> lab/runs.py (no Tornado)  lab/serve/ ──> lab/modes/ ──> lab/web/ ──> lab/instruments/ ──> lab/*.py
"""

from __future__ import annotations

import ast
import itertools
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab import ROOT
from lab.modes.contract import Mode
from lab.modes.registry import MODES
from tests import toymode

PACKAGES = ("lab", "handlers", "workloads", "peers", "bench", "scripts")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants in `tree` (prose: they may name anything)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _started(tree: ast.AST) -> set[str]:
    """Modules the code starts with `python -m`: a "-m" followed by a name in an argv list, tuple or call,
    or "-m NAME" inside a string that is not a docstring."""
    found: set[str] = set()
    prose = _docstrings(tree)
    for node in ast.walk(tree):
        items = node.elts if isinstance(node, ast.List | ast.Tuple) else node.args if isinstance(node, ast.Call) else []
        for flag, name in itertools.pairwise(items):
            if isinstance(flag, ast.Constant) and flag.value == "-m" and isinstance(name, ast.Constant):
                found.add(str(name.value))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            found |= set(re.findall(r"(?:^|\s)-m\s+([A-Za-z_][\w.]*)", node.value))
    return found


def _imported(tree: ast.AST) -> set[str]:
    """Every module `tree` imports, wherever (TYPE_CHECKING and function bodies included); `from a import b`
    names a.b too, in case b is a module."""
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module)
            imported |= {f"{node.module}.{alias.name}" for alias in node.names}
    return imported


def _named(tree: ast.AST) -> dict[str, set[str]]:
    """What a module names: the modules it imports and those it starts with -m."""
    return {"imports": _imported(tree), "starts": _started(tree)}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources(package: str) -> Iterator[Path]:
    yield from sorted((ROOT / package).rglob("*.py"))


def _modules(package: str) -> dict[str, dict[str, set[str]]]:
    """Every module of `package` (its sub-packages included) and what it names."""
    return {
        str(path.relative_to(ROOT)): _named(ast.parse(path.read_text(), filename=str(path)))
        for path in _sources(package)
    }


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(f"{prefix}.") for prefix in prefixes)


def _wrong(named: dict[str, set[str]], forbidden: tuple[str, ...], may_start: frozenset[str]) -> set[str]:
    imports = {name for name in named["imports"] if _within(name, forbidden)}
    starts = {name for name in named["starts"] - may_start if _within(name, forbidden)}
    return imports | {f"-m {name}" for name in starts}


# ---------- layers: what each part of the house may name ----------

GROUND = ("lab.errors", "lab.settings", "lab.machine", "lab.native", "lab.logs", "lab.loopback", "lab.collector",
          "lab.procs", "lab.database")  # fmt: skip
LAB_ROOMS = ("lab.serve", "lab.web", "lab.modes", "lab.instruments", "lab.config", "lab.runs")
# The modes run work: they know nothing of start-up, the config (ServerConfig instead) or the meters.
MODES_MAY_NOT_NAME = ("lab.serve", "lab.config", "lab.instruments", "lab.runs")


@pytest.mark.parametrize(
    ("package", "forbidden", "may_start"),
    [
        # The machinery serves requests' code, never the other way round: it neither imports
        # handlers or the bench nor starts them as programs (the upstream it starts lives in lab/).
        ("lab", ("handlers", "bench", "peers"), frozenset()),
        # Pure functions; `page` renders with tornado.template, a module of its own (test_workloads_use_only_...).
        (
            "workloads",
            (
                "handlers",
                "lab",
                "bench",
                "peers",
                "tornado.web",
                "tornado.ioloop",
                "tornado.httpserver",
                "tornado.httpclient",
                "tornado.iostream",
                "tornado.gen",
                "tornado.process",
            ),
            frozenset(),
        ),
        # The page's race runs the lab's own load generator (lab/race/) as a separate program: no bench tool.
        ("handlers", ("bench", "peers"), frozenset()),
        # The modes run work: they know nothing of start-up, the config (ServerConfig instead) or the meters;
        # the embedded upstream is a Tornado app of its own on the web plumbing.
        ("lab/modes", MODES_MAY_NOT_NAME, frozenset()),
        # The web plumbing stands on the ground floor and the instruments; start-up and the modes stand on it.
        ("lab/web", ("lab.serve", "lab.modes", "lab.config", "lab.runs"), frozenset()),
        ("lab/instruments", ("lab.serve", "lab.web", "lab.modes", "lab.config", "lab.runs"), frozenset()),
    ],
)
def test_imports_only_run_downwards(package: str, forbidden: tuple[str, ...], may_start: frozenset[str]) -> None:
    for module, named in _modules(package).items():
        wrong = _wrong(named, forbidden, may_start)
        assert not wrong, f"{module} names {sorted(wrong)}"


def test_the_server_starts_only_programs_of_its_own() -> None:
    # The page's race (lab.race), the embedded upstream...: a server runs from a checkout without bench/.
    for package in ("lab", "handlers"):
        for module, named in _modules(package).items():
            foreign = {name for name in named["starts"] if not _within(name, ("lab",))}
            assert not foreign, f"{module} starts {sorted(foreign)}"


def test_workloads_use_only_tornado_s_template_engine() -> None:
    # tornado.template imports tornado.escape and tornado.util, none of the web stack: a workload renders a
    # page as a WSGI app or a Django view would, with no server of Tornado's around it.
    for module, named in _modules("workloads").items():
        tornado = {name for name in named["imports"] if _within(name, ("tornado",))}
        assert tornado <= {"tornado.template", "tornado.template.Template"}, f"{module} names {sorted(tornado)}"


def test_the_ground_floor_stands_on_nothing_of_the_rooms() -> None:
    for module in GROUND:
        path = ROOT / f"{module.replace('.', '/')}.py"
        wrong = _wrong(_named(ast.parse(path.read_text())), LAB_ROOMS, frozenset())
        assert not wrong, f"{module} names {sorted(wrong)}"


@pytest.mark.parametrize(
    "source",
    [
        "import handlers.base",
        "from bench.lib.servers import lab_server",
        "if TYPE_CHECKING:\n    from handlers.base import LabHandler",
        "def later():\n    from bench.lib import servers",
        'subprocess.Popen([sys.executable, "-m", "handlers.upstream", "--fd", "3"])',
        'asyncio.create_subprocess_exec(sys.executable, "-m", "bench.race")',
        'ARGV = (python, "-m", "bench.compare")',
        'os.system("python -m handlers.upstream --port 9000")',
    ],
)
def test_the_layer_check_sees_imports_and_programs_started_by_name(source: str) -> None:
    assert _wrong(_named(ast.parse(source)), ("handlers", "bench"), frozenset())


def test_the_layer_check_reads_docstrings_as_prose() -> None:
    source = '"""Started as `python -m handlers.upstream`."""\ndef f():\n    """Or `python -m bench.race`."""\n'
    assert not _wrong(_named(ast.parse(source)), ("handlers", "bench"), frozenset())


# ---------- no import circle ----------


def _graph() -> dict[str, set[str]]:
    """Each project module and the project modules it imports (however: TYPE_CHECKING and lazy imports too); a
    mode's runner is the registry's, which asks for it (its entry's `runner()`), not the entry's, which only
    imports it when asked."""
    paths = [path for package in PACKAGES for path in _sources(package)] + [ROOT / "server.py"]
    names = {_module_name(path): path for path in paths}
    graph = {
        name: {other for other in _imported(ast.parse(path.read_text())) if other in names and other != name}
        for name, path in names.items()
    }
    for mode in MODES.values():
        runner = mode.runner().__module__
        graph[runner.rpartition(".")[0]].discard(runner)
        graph["lab.modes.registry"].add(runner)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each is an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while (top := stack.pop()) != node:
                component.append(top)
            if component:
                found.append(sorted([node, *component]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_round_a_circle() -> None:
    assert _circles(_graph()) == []


def test_the_circle_check_finds_a_circle_through_a_runner_path_or_a_type_only_import() -> None:
    graph = {"config": {"registry"}, "registry": {"runner"}, "runner": {"pool"}, "pool": {"config"}, "x": {"config"}}
    assert _circles(graph) == [["config", "pool", "registry", "runner"]]
    graph = _graph()
    graph["lab.modes.pool"].add("lab.config")  # as `if TYPE_CHECKING: from lab.config import Config` was
    assert any({"lab.config", "lab.modes.registry", "lab.modes.pool"} <= set(c) for c in _circles(graph))


# ---------- one mode, one folder ----------


def _home(mode: Mode) -> Path:
    """A mode's folder: the package of its runner's module (lab/modes/processing for ...processing.runner)."""
    return ROOT / Path(*mode.runner().__module__.split(".")[:-1])


# The modes to hold to the folder rules: the registry's, under lab/modes/, and tests/test_modes.py's toy, a
# folder of the same shape under tests/ (it proves that a new mode is one folder, one entry and one test).
FOLDERS = [(mode, ROOT / "lab" / "modes") for mode in MODES.values()] + [(toymode.MODE, ROOT / "tests")]


@pytest.mark.parametrize(("mode", "root"), FOLDERS, ids=[mode.name for mode, _ in FOLDERS])
def test_each_mode_is_a_folder_of_its_own_holding_its_entry_and_runner(mode: Mode, root: Path) -> None:
    home = _home(mode)
    assert home.parent == root and (home / "__init__.py").exists() and (home / "runner.py").exists()
    assert sum(_home(other) == home for other, _ in FOLDERS) == 1  # no two modes share one
    entry = ast.parse((home / "__init__.py").read_text())
    assert any(name.startswith("lab.modes.contract") for name in _imported(entry))  # its Mode is declared here
    runner_module = mode.runner().__module__
    top = ast.Module(body=[node for node in entry.body if not isinstance(node, ast.FunctionDef)], type_ignores=[])
    assert runner_module not in _imported(top), "the entry stays light: its runner() imports the runner when asked"
    asks = [node for node in entry.body if isinstance(node, ast.FunctionDef) and node.name == "runner"]
    assert asks and runner_module in _imported(asks[0]), "the entry's runner() imports its runner"
    for path in sorted(home.rglob("*.py")):
        # What the modes may not name (test_imports_only_run_downwards's row for lab/modes), for every folder.
        wrong = _wrong(_named(ast.parse(path.read_text())), MODES_MAY_NOT_NAME, frozenset())
        assert not wrong, f"{path.relative_to(ROOT)} names {sorted(wrong)}"


@pytest.mark.parametrize(("mode", "root"), FOLDERS, ids=[mode.name for mode, _ in FOLDERS])
def test_nothing_outside_a_modes_folder_names_that_mode(mode: Mode, root: Path) -> None:
    home = _home(mode)
    for package in ("lab", "handlers", "peers"):
        for path in _sources(package):
            tree = ast.parse(path.read_text())
            prose = _docstrings(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and node.value == mode.name and id(node) not in prose:
                    assert home in path.parents, f"{path.relative_to(ROOT)}:{node.lineno}"


def test_no_file_name_prefix_stands_in_for_a_folder() -> None:
    # dask_runner.py, dask_cluster.py ... are lab/modes/distributed/; two modules of one folder never share
    # a prefix, and no module is named after a mode or a mode's family outside its folder.
    families = {*MODES, *(path.name for path in (ROOT / "lab" / "modes").iterdir() if path.is_dir()), "dask", "interp"}
    for package in PACKAGES:
        for folder in {path.parent for path in _sources(package)}:
            stems = [path.stem for path in folder.glob("*.py") if "_" in path.stem.strip("_")]
            prefixes = [stem.split("_")[0] for stem in stems]
            shared = {prefix for prefix in prefixes if prefixes.count(prefix) > 1}
            assert not shared, f"{folder.relative_to(ROOT)}: modules named {sorted(shared)}_*: a folder instead"
            named = {stem for stem in stems if stem.split("_")[0] in families}
            assert not named, f"{folder.relative_to(ROOT)}: {sorted(named)}: the mode's folder instead"


# ---------- records travel whole ----------


def test_a_run_is_resolved_and_answered_in_one_place_for_the_lab_and_its_peers() -> None:
    definitions: dict[str, list[str]] = {"resolve": [], "envelope": []}
    users: dict[str, set[str]] = {"resolve": set(), "envelope": set(), "KnownRuns": set()}
    for package in PACKAGES:
        for path in _sources(package):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef) and node.name in definitions:
                    definitions[node.name].append(str(path.relative_to(ROOT)))
                if isinstance(node, ast.ImportFrom) and node.module == "lab.runs":
                    for alias in node.names:
                        users.get(alias.name, set()).add(str(path.relative_to(ROOT)))
    assert definitions == {"resolve": ["lab/runs.py"], "envelope": ["lab/runs.py"]}
    # bench.size checks a route as the lab would before it starts a server for it.
    assert users["resolve"] == {"handlers/race.py", "peers/app.py", "bench/lib/sizing/targets.py"}
    # The run route resolves through the server's KnownRuns, which keeps what resolve() gave.
    assert users["KnownRuns"] == {"lab/serve/services.py"}
    assert users["envelope"] == {"handlers/run.py", "peers/app.py", "bench/lib/meters.py"}  # (meters: times it)


def test_a_server_loads_the_accept_policies_beyond_tornados_own_only_when_it_uses_them() -> None:
    # lab/serve/accept/'s dispatch and reuseport, and a dispatched child's channel: a student reading a single
    # server's start-up meets none of them.
    code = (
        "import sys, handlers.app, lab.serve.main; "
        "print(sorted(m for m in sys.modules if m.startswith('lab.serve.accept.') or m == 'lab.web.channel'))"
    )
    shown = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "[]"
    policies = {path.stem for path in (ROOT / "lab" / "serve" / "accept").glob("*.py")}
    assert {"dispatch", "reuseport"} <= policies


def test_the_peers_app_loads_no_tornado() -> None:
    # uWSGI and gunicorn load it in every worker: the lab's web stack has no business there.
    code = "import sys, peers.app; print(sorted(m for m in sys.modules if m.split('.')[0] in ('tornado', 'handlers')))"
    shown = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "[]"


# ---------- the bench: tools don't import tools ----------


def _tools() -> set[str]:
    """The bench's tools: its top-level modules (`python -m bench.<tool>`; locustfile.py is Locust's)."""
    return {f"bench.{path.stem}" for path in (ROOT / "bench").glob("*.py") if path.stem != "__init__"}


def test_no_bench_tool_imports_another_and_the_library_imports_none() -> None:
    tools = _tools()
    for module, named in _modules("bench").items():
        wrong = {name for name in named["imports"] if name in tools}
        assert not wrong, f"{module} imports {sorted(wrong)}: move what they share into bench/lib/"


def test_only_the_race_command_line_imports_itself() -> None:
    # The other bench tools (and anything else) use the engine, not the CLI module.
    for package in ("bench", "lab", "handlers"):
        for module, named in _modules(package).items():
            assert "bench.race" not in named["imports"], module


# ---------- sizes ----------


def test_no_file_over_400_lines_and_no_function_over_60() -> None:
    for package in PACKAGES:
        for path in _sources(package):
            source = path.read_text()
            assert len(source.splitlines()) <= 400, path.relative_to(ROOT)
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    assert node.end_lineno is not None
                    lines = node.end_lineno - node.lineno + 1
                    assert lines <= 60, f"{path.relative_to(ROOT)}: {node.name} is {lines} lines"


def test_server_py_is_a_thin_shim() -> None:
    source = (ROOT / "server.py").read_text()
    assert source.count("noqa") <= 2 and len(source.splitlines()) < 30
