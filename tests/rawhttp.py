"""A raw HTTP/1.1 exchange over a socket: for requests no HTTP library would send."""

from __future__ import annotations

import email
import json
import socket
from dataclasses import dataclass
from email.message import Message
from typing import Any


@dataclass
class RawReply:
    status: int
    headers: Message
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def exchange(base_url: str, request: bytes, timeout: float = 30.0) -> RawReply:
    """Send `request` as is; read one reply (its Content-Length, or until the server closes)."""
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = email.message_from_string("\r\n".join(lines[1:]) + "\r\n\r\n")  # names case-insensitive
        length = int(headers["Content-Length"]) if headers["Content-Length"] else None
        while (length is None or len(body) < length) and (chunk := sock.recv(65536)):
            body += chunk
    status = int(lines[0].split(" ")[1]) if lines[0].startswith("HTTP/1.") else 0
    return RawReply(status, headers, body)


def get_raw(
    base_url: str, target: bytes, method: bytes = b"GET", extra: bytes = b"", host: bytes = b"localhost"
) -> RawReply:
    return exchange(
        base_url,
        method + b" " + target + b" HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n" + extra + b"\r\n",
    )
