"""Failures of the upstream HTTP APIs (the chat provider, the embedding provider) said in a few words.

connection_failure(exc) -> str   "connection refused", "host name not found", "timed out", …
short(text, n) -> str            one line of at most n characters, for a message or a log
"""

from __future__ import annotations

import socket
from typing import Any


def connection_failure(exc: BaseException) -> str:
    """Why a connection failed, in a few words: the first cause in the chain that says more than
    the SDK's own "Connection error."."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cur, socket.gaierror):
            return "host name not found"
        if isinstance(cur, (TimeoutError, socket.timeout)):
            return "timed out"
        text = str(cur)
        if "Connection refused" in text or "Connect call failed" in text:
            return "connection refused"
        if "Name or service not known" in text or "nodename nor servname" in text or "getaddrinfo failed" in text:
            return "host name not found"
        cur = cur.__cause__ or cur.__context__
    text = short(str(exc))
    return text.rstrip(".").lower() if text else type(exc).__name__


def short(text: Any, n: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"
