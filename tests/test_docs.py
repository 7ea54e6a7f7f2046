"""The README, CONTRIBUTING and docs/ hold: links and anchors resolve, named things exist, generated tables match.

Each check is also run on a page written to fail it, so that a check which
could not fail would be caught here too.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from lab import ROOT
from scripts import reference
from tests.docs_check import Page, anchor, broken_links, misquoted, named_problems

DOCS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])
REQUIRED = ["modes", "bench", "peers", "instruments", "api", "operating", "design", "glossary", "results"]
# Flags of other programs the pages quote: uWSGI, gunicorn, Dask, siege, curl, pytest, ulimit.
OTHER_FLAGS = frozenset({"--ini", "--http-socket", "--threads", "--gevent", "--processes", "-p", "-w", "--bind",
                         "--host", "--port", "--no-dashboard", "--nthreads", "--nworkers", "-R", "-c", "-r", "-s",
                         "-n", "--dist", "--no-loadscope-reorder", "-Hn", "-k", "--preload"})  # fmt: skip
# The options bench/locustfile.py adds to Locust's own command line, read from where it declares them.
OTHER_FLAGS |= frozenset(re.findall(r'\("(--lab-[\w-]+)"', (ROOT / "bench" / "locustfile.py").read_text()))


@pytest.fixture(scope="module")
def pages() -> dict[Path, Page]:
    return {path.resolve(): Page.read(path) for path in DOCS}


def test_every_page_the_docs_promise_exists_and_the_readme_stays_short() -> None:
    assert {f"docs/{name}.md" for name in REQUIRED} <= {str(p.relative_to(ROOT)) for p in DOCS}
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert len(set(re.findall(r"\]\((docs/[\w./-]+)", readme))) >= 8  # links into docs/, distinct pages or anchors


def test_every_relative_link_and_anchor_resolves(pages: dict[Path, Page]) -> None:
    assert list(broken_links(pages)) == []


def test_every_route_target_module_flag_and_path_the_docs_name_exists(pages: dict[Path, Page]) -> None:
    assert list(named_problems(pages.values(), OTHER_FLAGS)) == []


def test_the_code_modes_md_quotes_is_in_its_files() -> None:
    page = ROOT / "docs" / "modes.md"
    assert len(re.findall(r"^```python\n# ", page.read_text(), re.M)) >= 7  # every mode's, forked's too
    assert list(misquoted(page)) == []


def test_a_misquote_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "quotes.md"
    head = "```python\n# lab/modes/blocking/runner.py\n"
    run = "    async def run(self, workload: str, params: dict[str, Any]) -> RunRecord:\n"
    page.write_text(
        f"{head}{run}        return run_timed(workload, params)\n```\n\n"  # as in the file, indented one level less
        f"{head}{run}        return run_timed(params, workload)\n```\n\n"  # a line changed
        f"{head}        return run_timed(workload, params)\n...\n{run}```\n\n"  # out of order
        "```python\n# lab/nothing.py\nx = 1\n```\n"
    )
    missing = "quotes.md: lab/modes/blocking/runner.py has no 'async def run(self, workload: str, param'..."
    assert list(misquoted(page)) == [
        missing,
        f"{missing} after the lines before",
        "quotes.md: quotes lab/nothing.py, which does not exist",
    ]


def test_the_generated_tables_match_the_code() -> None:
    assert reference.stale((ROOT / "docs" / "api.md").read_text()) == [], "run make docs"


# ---------- each check fails on a page written to fail it ----------


def test_anchors_follow_the_code_hosts_rules() -> None:
    assert anchor("bench.crowd") == "benchcrowd"
    assert anchor("Who accepts the connection") == "who-accepts-the-connection"
    assert anchor("`/stats` and [metrics](api.md)") == "stats-and-metrics"
    assert anchor("pool, lanes") == "pool-lanes"


def test_a_broken_link_or_anchor_is_caught(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\n\n## Same\n\n## Same\n\n[ok](b.md#real) [ok](#same-1) [ok](#title)\n"
                                   "[gone](missing.md) [bad](b.md#nowhere) `[in code](missing.md)`\n")  # fmt: skip
    (tmp_path / "b.md").write_text("## Real\n\n```\n## not a heading\n```\n[bad](a.md#not-a-heading)\n")
    pages = {p.resolve(): Page.read(p) for p in (tmp_path / "a.md", tmp_path / "b.md")}
    assert sorted(broken_links(pages)) == [
        "a.md: b.md#nowhere: no heading makes #nowhere",
        "a.md: missing.md: no such file",
        "b.md: a.md#not-a-heading: no heading makes #not-a-heading",
    ]


def test_an_unknown_route_target_module_flag_or_path_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "bad.md"
    page.write_text(
        "Good: `GET /stats`, `/blocking/fib`, `/static/{name}`, `make run`, `--processes N`.\n\n"
        "Bad: `GET /nowhere`, `/blocking/nosuchwork`, `make deploy`, `--proceses 2`, `lab/nothing.py`.\n\n"
        "```sh\n"
        "curl -s 'localhost:8000/threading/matmul?n=800'\n"
        "curl -s 'localhost:8000/nosuchmode'\n"
        'make run ARGS="--processes 0 --trheads 4"\n'
        ".venv/bin/python -m bench.race --all --warmpu 3\n"
        ".venv/bin/python -m bench.nothing\n"
        "python server.py --port 0 --bogus\n"
        ".venv/bin/python -m bench.crowd --server-args '--upstream-client simple --nope'\n"
        "```\n"
    )
    found = " | ".join(named_problems([Page.read(page)], OTHER_FLAGS))
    for problem in ("no route /nowhere", "no route /blocking/nosuchwork", "make has no target deploy",
                    "no command here has a flag --proceses", "no file lab/nothing.py", "no route /nosuchmode",
                    "server.py has no flag --trheads", "bench.race has no flag --warmpu", "no module bench.nothing",
                    "server.py has no flag --bogus", "server.py has no flag --nope"):  # fmt: skip
        assert problem in found
    assert found.count("|") == 10, found  # the good names above raised nothing


def test_a_stale_generated_table_is_caught() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    assert reference.stale(text.replace("`--grace S`", "`--grace-period S`")) == ["flags"]
    assert reference.stale(text.replace("| `/metrics` |", "| `/metrix` |")) == ["routes"]


# A line that is only a merge's marker: seven of <, = or > (then, for < and >, a space and a name).
CONFLICT_MARKER = re.compile(r"^(<{7} \S|={7}$|>{7} \S)", re.MULTILINE)


def _conflicted(paths: list[Path]) -> list[str]:
    """`name:line` of the first conflict marker in each file that has one."""
    found = []
    for path in paths:
        text = path.read_text(errors="replace")
        if marker := CONFLICT_MARKER.search(text):
            found.append(f"{path.name}:{text.count(chr(10), 0, marker.start()) + 1}")
    return found


def test_no_tracked_file_holds_a_merges_conflict_markers() -> None:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    texts = {".md", ".py", ".js", ".sh", ".html", ".css", ".txt", ".toml", ".cfg", ".ini", ""}
    assert _conflicted([ROOT / name for name in listed.splitlines() if Path(name).suffix in texts]) == []


def test_a_conflict_marker_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# a page\n\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> main\n")
    assert _conflicted([page]) == ["page.md:3"]
    page.write_text("# a page\n\n| a |\n|=======|\n")
    assert _conflicted([page]) == []
