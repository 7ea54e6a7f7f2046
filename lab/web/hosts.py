"""Which names this server answers to, and which browser requests it refuses: DNS rebinding and cross-site work.

A page on any site can have its own name resolve to 127.0.0.1 (DNS
rebinding): the browser then sends that page's requests to the lab with
`Host: evil.example:PORT` and treats the answers as the page's own, so the
page can read /stats and open the race WebSocket. The lab therefore answers
only requests whose Host is one of its names (Jupyter's local-host check,
Vite's `server.allowedHosts`, webpack-dev-server's host check, all added
after rebinding reports): the loopback ones (`localhost`, 127.0.0.0/8,
`[::1]`), the address it was bound to, and what `--allow-host` adds. The
port is not compared: an ssh tunnel or a container maps ports, and a name
that is not the lab's is refused whatever the port.

The race WebSocket checks the page's `Origin` against the same names, and
routes that run work refuse what a browser marks `Sec-Fetch-Site:
cross-site` (Fetch Metadata): an `<img>` or a no-cors fetch needs no
preflight, so any site could otherwise burn the user's cores.
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

# Bind addresses that mean "every interface": no name of their own to allow.
WILDCARDS = frozenset({"", "0.0.0.0", "::"})
LOOPBACK_NAMES = frozenset({"localhost"})
# How much of a refused Host or Origin the error message repeats.
SHOWN = 100
# How many Host headers' answers AllowedHosts.allows keeps.
ANSWERS_KEPT = 64


def host_name(netloc: str) -> str | None:
    """The name in a Host header (or an Origin's host[:port]): lower case, no port, no brackets; None if malformed."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):  # [::1]:8000
        name, bracket, rest = netloc[1:].partition("]")
        if not bracket:
            return None
    else:
        name, colon, port = netloc.partition(":")
        rest = colon + port
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return None
    name = name.removesuffix(".")  # "localhost." is the same name
    return name or None


def _is_loopback(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return name in LOOPBACK_NAMES


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def allowed_host_arg(text: str) -> str:
    """--allow-host's value: a name or address (no scheme or port), `.example.com` (it and its subdomains), or `*`."""
    if text == "*":
        return text
    suffix = text.startswith(".")
    body = text[1:] if suffix else text
    if ":" in body and not body.startswith("[") and _is_ipv6(body):  # given without its brackets
        body = f"[{body}]"
    name = host_name(body)
    if name is None or body.lower().strip("[]").removesuffix(".") != name or any(c in name for c in "/@ \t"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a host name or address: give it without scheme or port")
    return f".{name}" if suffix else name


def _shown(name: str) -> str:
    return f"[{name}]" if ":" in name else name


class AllowedHosts:
    """The names this server answers to: loopback, the address it is bound to, and `--allow-host`'s."""

    def __init__(self, extra: Iterable[str] = (), bound: str = "127.0.0.1") -> None:
        extra = tuple(extra)
        self.any = "*" in extra
        self.names = {name for name in extra if not name.startswith(".") and name != "*"}
        self.suffixes = tuple(name for name in extra if name.startswith("."))
        self.bound = host_name(f"[{bound}]" if _is_ipv6(bound) else bound) if bound not in WILDCARDS else None
        if self.bound is not None:
            self.names.add(self.bound)
        self._answers: dict[str, bool] = {}

    def allows(self, netloc: str) -> bool:
        """Whether a Host header (or an Origin's host[:port]) names this server."""
        if self.any:
            return True
        # Every request asks, nearly always with the same header or two: each answer is kept (a few
        # microseconds of parsing and ipaddress's a request), a bounded number of them, against a crowd of names.
        known = self._answers.get(netloc)
        if known is None:
            if len(self._answers) >= ANSWERS_KEPT:
                self._answers.clear()
            known = self._answers[netloc] = self._allows(netloc)
        return known

    def _allows(self, netloc: str) -> bool:
        name = host_name(netloc)
        if name is None:
            return False
        if name in self.names or _is_loopback(name):
            return True
        return any(name.endswith(suffix) or name == suffix[1:] for suffix in self.suffixes)

    def allows_origin(self, origin: str) -> bool:
        """Whether a page's Origin (`http://host:port`; `null` for a sandboxed or local page) is on these names."""
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and bool(parts.netloc) and self.allows(parts.netloc)

    def describe(self) -> str:
        """The names allowed, in words, for a refusal message."""
        if self.any:
            return "any name (--allow-host '*')"
        names = ["localhost", "127.0.0.1", "::1", *sorted(self.names - {"localhost", "127.0.0.1", "::1"})]
        return ", ".join([*map(_shown, names), *(f"*{suffix}" for suffix in self.suffixes)])

    def refusal(self, host: str) -> str:
        """Why a request with this Host header is refused, and the flag that would allow it."""
        shown = host if len(host) <= SHOWN else f"{host[:SHOWN]}…"
        name = host_name(host)
        how = f"start the lab with --allow-host {name} to serve it" if name else "that is not a host name"
        return (
            f"Host {shown!r} is not one of this server's names ({self.describe()}, any port): a page on another "
            f"site can point its own name at this machine (DNS rebinding); {how}"
        )


def cross_site(sec_fetch_site: str | None) -> bool:
    """Whether a browser marked the request as made by a page of another site (Fetch Metadata).

    `same-origin`, `same-site` (another port of this host), `none` (the
    address bar, a bookmark) and no header at all (curl, the bench tools, an
    older browser) are served.
    """
    return (sec_fetch_site or "").strip().lower() == "cross-site"
