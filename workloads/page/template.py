"""The page's template, rendered with tornado.template: a table of the rows a query returned.

tornado.template is Tornado's template engine, a module of its own (it
imports tornado.escape and tornado.util, not tornado.web): like Jinja2 it
compiles a template once into Python code, and a render runs that code, in
pure Python, holding the GIL, for a time that grows with the rows. Jinja2
is what Flask users run, Django has its own engine; their cost has the same
shape (compiled Python, escaping per cell), and Tornado's needs nothing this
lab does not already install and loads in a sub-interpreter (MarkupSafe's C
speedups, which Jinja2 uses, are not known to).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title></head>
<body><h1>{{ title }}</h1><p>{{ len(rows) }} items</p>
<table><thead><tr><th>#</th><th>name</th><th>category</th><th>price</th><th>stock</th></tr></thead><tbody>
{% for item, name, category, cents, stock in rows %}<tr class="{{ 'odd' if item % 2 else 'even' }}">\
<td>{{ item }}</td><td>{{ name }}</td><td>{{ category.title() }}</td>\
<td>{{ cents // 100 }}.{{ '%02d' % (cents % 100) }}</td>\
<td>{% if stock %}{{ stock }}{% else %}sold out{% end %}</td></tr>
{% end %}</tbody></table></body></html>
"""


@cache
def _compiled() -> Any:
    """The template, compiled once per process (or sub-interpreter) on first use."""
    # Imported here: the registry imports this module in every process (the peers' WSGI workers too), and
    # only a process that renders a page needs the template engine.
    from tornado.template import Template  # noqa: PLC0415

    return Template(PAGE, name="page.html")


def render(rows: Sequence[Sequence[Any]], title: str = "Items") -> str:
    """The page for `rows` (id, name, category, price in cents, stock), as HTML text."""
    html: bytes = _compiled().generate(rows=rows, title=title)
    return html.decode()
