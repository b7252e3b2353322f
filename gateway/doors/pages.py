"""Plain HTTP on the WebSocket's port: /healthz, the web page, /static/ assets; responses built here.

Pure functions of the path: no state, no sockets (websockets calls them from `process_request`).
"""

from __future__ import annotations

import mimetypes
from http import HTTPStatus
from pathlib import Path
from typing import Any

from websockets.datastructures import Headers
from websockets.http11 import Response

from .. import protocol

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self' ws: wss:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
PLACEHOLDER = b"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Jarvis Gateway</title></head>
<body><h1>Jarvis Gateway</h1><p>The gateway is running. Connect a JSON-RPC client over WebSocket to this address.</p></body></html>"""
TEXT = "text/plain; charset=utf-8"


def response(status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> Response:
    h = Headers()
    h["Content-Type"] = content_type
    h["Content-Length"] = str(len(body))
    h["X-Content-Type-Options"] = "nosniff"
    h["Referrer-Policy"] = "no-referrer"
    for k, v in (headers or {}).items():
        h[k] = v
    return Response(status, HTTPStatus(status).phrase, h, body)


def text(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return response(status, f"{message}\n".encode(), TEXT, headers)


def json(status: int, obj: Any) -> Response:
    return response(status, protocol.encode(obj), "application/json", {"Cache-Control": "no-store"})


def route(path: str) -> Response:
    """A plain (non-upgrade) GET."""
    if path == "/healthz":
        return json(200, {"status": "ok"})
    if path in ("/", "/index.html"):
        index = WEB_DIR / "index.html"
        body = index.read_bytes() if index.is_file() else PLACEHOLDER
        return response(
            200, body, "text/html; charset=utf-8", {"Content-Security-Policy": CSP, "Cache-Control": "no-cache"}
        )
    if path.startswith("/static/"):
        return static(path[len("/static/") :])
    return text(404, "not found")


def static(rel: str) -> Response:
    """A file under web/, never outside it (no `..`, no absolute paths, no symlinks leaving it)."""
    not_found = text(404, "not found")
    if not rel or "\\" in rel or any(part in ("", ".", "..") for part in rel.split("/")):
        return not_found
    base = WEB_DIR
    target = (base / rel).resolve()
    if base not in target.parents or not target.is_file():
        return not_found
    ctype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
    if target.suffix == ".js":
        ctype = "text/javascript"
    if ctype.startswith("text/") or ctype in ("application/json", "image/svg+xml"):
        ctype += "; charset=utf-8"
    # Assets are small and change with upgrades: revalidate each load rather than risk a stale UI.
    return response(200, target.read_bytes(), ctype, {"Cache-Control": "no-cache", "Content-Security-Policy": CSP})
