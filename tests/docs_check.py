"""What tests/test_docs.py checks in Markdown: links and anchors as a code host renders them, and the names
(routes, make targets, `python -m` modules, flags, repository paths) the pages quote in code."""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from tornado.routing import PathMatches

from handlers.routes import MODULES
from lab import ROOT
from lab.config import build_parser
from lab.modes.registry import MODES
from workloads.registry import WORKLOADS

FENCE = re.compile(r"^ {0,3}(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
HTML_ID = re.compile(r"""<a\s+(?:name|id)=["']([^"']+)["']""")
# A route as the pages write it: `GET /x`, `/x`, `/x?query`, or a loopback URL's path.
VERB_ROUTE = re.compile(r"^(?:GET|HEAD|POST|WS)\s+(/\S*)$")
URL_PATH = re.compile(r"(?:localhost|127\.0\.0\.1):\d+(/[^\s'\"`)]*)")
NOT_ROUTES = ("/proc", "/etc", "/tmp", "/usr", "/dev", "/sys", "/work", "/root", "/home", "/var")
# What a placeholder in a route stands for, to try the route with.
PLACEHOLDERS = {"workload": "count", "mode": "blocking", "name": "app.js"}
# Routes of the other servers the pages show: the embedded upstream, the peers' WSGI app, the crowd's floor.
OTHER_ROUTES = (r"/delay", r"/wsgi", r"/wsgi/[a-z]+", r"/sleep")
REPO_PATH = re.compile(r"(?<![\w./-])((?:bench|lab|handlers|workloads|tests|peers|static|scripts|docs)/[\w./-]*\w)")
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it: link text kept, lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@dataclass
class Page:
    """One Markdown file: its prose lines (code removed), inline code spans, code blocks' lines and anchors."""

    path: Path
    prose: list[str] = field(default_factory=list)
    code: list[str] = field(default_factory=list)
    anchors: set[str] = field(default_factory=set)

    @classmethod
    def read(cls, path: Path) -> Page:
        page = cls(path)
        seen: dict[str, int] = {}
        fenced = False
        for line in path.read_text().splitlines():
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                page.code.append(line)
                continue
            page.code += [m.group(2).strip() for m in INLINE_CODE.finditer(line)]
            page.prose.append(INLINE_CODE.sub("", line))
            page.anchors.update(HTML_ID.findall(line))
            heading = HEADING.match(line)
            if heading:
                slug = anchor(heading.group(2))
                count = seen.get(slug, 0)
                seen[slug] = count + 1
                page.anchors.add(slug if count == 0 else f"{slug}-{count}")
        return page


def broken_links(pages: dict[Path, Page]) -> Iterator[str]:
    """Every relative link whose file, or whose #anchor in a Markdown file, does not exist."""
    for page in pages.values():
        for line in page.prose:
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # https:, mailto:: not this repository's
                where, _, fragment = target.partition("#")
                path = (page.path.parent / where).resolve() if where else page.path
                name = f"{page.path.name}: {target}"
                if not path.exists():
                    yield f"{name}: no such file"
                elif fragment and path.suffix == ".md":
                    linked = pages.get(path) or Page.read(path)
                    if fragment not in linked.anchors:
                        yield f"{name}: no heading makes #{fragment}"


@cache
def lab_routes() -> tuple[list[PathMatches], set[str]]:
    """The lab's fixed routes as Tornado matches them, and the registry's modes (the /{mode} route)."""
    fixed = [PathMatches(pattern) for module in MODULES for pattern, _ in module.routes if not pattern.startswith("/(")]
    return fixed + [PathMatches(p) for p in OTHER_ROUTES], set(MODES)


def route_exists(route: str) -> bool:
    path = route.split("?", 1)[0]
    candidates = {path.replace("[/{workload}]", ""), path.replace("[/{workload}]", "/{workload}")}
    for written in candidates:
        candidate = written
        for name, value in PLACEHOLDERS.items():
            candidate = candidate.replace("{" + name + "}", value)
        fixed, modes = lab_routes()
        if any(m.regex.fullmatch(candidate) for m in fixed):
            continue
        parts = candidate.strip("/").split("/")
        if parts[0] in modes and len(parts) <= 2 and (len(parts) == 1 or parts[1] in WORKLOADS):
            continue
        return False
    return True


def routes_named(snippet: str) -> Iterator[str]:
    verb = VERB_ROUTE.match(snippet)
    if verb:
        yield verb.group(1)
    elif snippet.startswith("/") and " " not in snippet and not snippet.startswith(NOT_ROUTES):
        yield snippet
    yield from URL_PATH.findall(snippet)


@cache
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text()
    return frozenset(re.findall(r"^([a-z][\w-]*):", text, re.MULTILINE))


@cache
def tool_flags(tool: str) -> frozenset[str] | None:
    """The option strings of a command: server.py, bench/siege.sh, or a module with build_parser(); None if unknown."""
    if tool == "server.py":
        return frozenset(s for a in build_parser()._actions for s in a.option_strings)
    if tool == "bench/siege.sh":
        shown = subprocess.run([str(ROOT / "bench" / "siege.sh"), "--help"], capture_output=True, text=True,
                               check=True, timeout=30).stdout  # fmt: skip
        return frozenset(FLAG.findall(shown.split("options:", 1)[1]))
    # (Not bench.locustfile: importing Locust monkey-patches this process with gevent.)
    if tool.startswith(("bench.", "scripts.")) and tool != "bench.locustfile" and importlib.util.find_spec(tool):
        build = getattr(importlib.import_module(tool), "build_parser", None)
        if build is not None:
            return frozenset(s for a in build()._actions for s in a.option_strings)
    return None


def _words(text: str) -> list[str]:
    """`text` split into words like a shell would; at blanks where its quotes do not pair up."""
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return text.split()


def _segments(snippet: str) -> Iterator[list[str]]:
    """A code line as commands: split on |, ;, && and &, each split into words."""
    line = snippet.split(" #", maxsplit=1)[0].rstrip().removesuffix("\\")  # a continued line: its own words
    for part in re.split(r"\|\||&&|[|;&]", line):
        words = _words(part)
        if words:
            yield words


def _flag_problems(words: list[str], tool: str) -> Iterator[str]:
    known = tool_flags(tool)
    rest: list[str] = []
    skip = False
    for i, word in enumerate(words):
        if skip:
            skip = False
            continue
        if word == "--server-args" and i + 1 < len(words):
            yield from _flag_problems(["server.py", *_words(words[i + 1])], "server.py")
            skip = True
        rest.append(word)
    if known is None:
        return
    for word in rest:
        flag = word.split("=", 1)[0]
        if FLAG.fullmatch(flag) and flag not in known:
            yield f"{tool} has no flag {flag}"


def command_problems(snippet: str) -> Iterator[str]:
    """Unknown make targets, modules and flags in one code line or span."""
    for words in _segments(snippet):
        for i, word in enumerate(words):
            if word == "make" and i + 1 < len(words) and re.fullmatch(r"[a-z][\w-]*", words[i + 1]):
                target = words[i + 1]
                if target not in make_targets():
                    yield f"make has no target {target}"
                args = [w.split("=", 1)[1] for w in words[i + 2 :] if w.startswith("ARGS=")]
                tool = {"run": "server.py", "bench": "bench/siege.sh", "compare": "bench.compare"}.get(target)
                if args and tool:
                    yield from _flag_problems([tool, *_words(args[0])], tool)
            elif word == "-m" and i + 1 < len(words):
                module = words[i + 1]
                if "<" in module:
                    continue  # a placeholder: python -m bench.<tool>
                if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
                    yield f"no module {module}"
                else:
                    yield from _flag_problems(words[i + 2 :], module)
            elif word.endswith(("server.py", "bench/siege.sh")):
                tool = "server.py" if word.endswith("server.py") else "bench/siege.sh"
                yield from _flag_problems(words[i + 1 :], tool)


@cache
def all_flags() -> frozenset[str]:
    """Every flag of the lab's own commands: server.py, bench/siege.sh and every bench tool with a parser."""
    tools = ["server.py", "bench/siege.sh", *(f"bench.{p.stem}" for p in sorted((ROOT / "bench").glob("*.py")))]
    return frozenset(flag for tool in tools for flag in tool_flags(tool) or ())


def flag_problems(snippet: str, others: frozenset[str]) -> Iterator[str]:
    """A span that starts with a flag (`--processes N`) names one of the lab's flags, or one of `others`'."""
    first = FLAG.match(snippet)
    if first and first.group(1) not in all_flags() | others:
        yield f"no command here has a flag {first.group(1)}"


def named_problems(pages: Iterable[Page], other_flags: frozenset[str] = frozenset()) -> Iterator[str]:
    """Every route, make target, module, flag and repository path the pages' code names that does not exist.

    `other_flags` are the flags of other programs the pages quote (uWSGI's, siege's...).
    """
    for page in pages:
        for snippet in page.code:
            where = f"{page.path.name}: `{snippet[:80]}`"
            for route in routes_named(snippet):
                if not route_exists(route):
                    yield f"{where}: no route {route}"
            for problem in [*command_problems(snippet), *flag_problems(snippet, other_flags)]:
                yield f"{where}: {problem}"
            for path in REPO_PATH.findall(snippet):
                written = "<" not in path and "*" not in path and not path.startswith("bench/results")
                if written and not (ROOT / path).exists():
                    yield f"{where}: no file {path}"


# A quote of the source: a ```python block whose first line is `# <path>`; a line `...` stands for lines left out.
QUOTE = re.compile(
    r"^```python\n# ((?:lab|handlers|workloads|peers|bench|scripts)/[\w/]+\.py)\n(.*?)^```$", re.M | re.S
)


def _found_at(lines: list[str], run: list[str], start: int) -> int | None:
    """The line after where `run` appears in `lines`, from `start` on, each line shifted by one common indent."""
    quoted = len(run[0]) - len(run[0].lstrip())
    for at in range(start, len(lines) - len(run) + 1):
        shift = len(lines[at]) - len(lines[at].lstrip()) - quoted
        if shift >= 0 and all(
            lines[at + i] == " " * shift + line if line.strip() else not lines[at + i].strip()
            for i, line in enumerate(run)
        ):
            return at + len(run)
    return None


def misquoted(page: Path) -> Iterator[str]:
    """Every quote of the source on `page` whose lines are not in its file, in that order (`...`: lines left out)."""
    for path, body in QUOTE.findall(page.read_text()):
        source = ROOT / path
        if not source.exists():
            yield f"{page.name}: quotes {path}, which does not exist"
            continue
        lines, start = source.read_text().splitlines(), 0
        runs: list[list[str]] = [[]]
        for line in body.splitlines():
            if line.strip() == "...":
                runs.append([])
            else:
                runs[-1].append(line)
        for run in (run for run in runs if run):
            found = _found_at(lines, run, start)
            if found is None:
                where = " after the lines before" if start else ""
                yield f"{page.name}: {path} has no {run[0].strip()[:40]!r}...{where}"
                break
            start = found
