"""Files a client sends in pieces over its connection, for `admin.import {upload}`: how the web page imports
an export from the browser's machine. A WebSocket frame is 1 MiB after auth and an export hundreds of MB,
so the page sends base64 pieces with `admin.upload`, in order, and then names the upload to import.

Each upload is one file `<stateDir>/uploads/<id>/<its name>` (owner-only, in owner-only folders), appended
piece by piece; errors about it name the file as the person named it. A piece names its `offset`, which must be the bytes received so far: a piece sent twice
or out of order is refused, never written twice. Limits: `MAX_BYTES` per upload, `MAX_OPEN` uploads at
once, `PIECE_BYTES` per piece; an upload left alone for `IDLE_S` is deleted, and so is every upload once
it was imported (whatever came of it). Everything here blocks: call it in a thread.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import Conflict, Invalid, NotFound
from ..fsutil import ensure_private_dir

MAX_BYTES = 1 << 30  # one upload, at most (1 GiB)
MAX_OPEN = 4  # uploads held at once, per gateway
PIECE_BYTES = 512 << 10  # one piece, decoded (its base64 fits a 1 MiB frame with room to spare)
IDLE_S = 600.0  # an upload not written to for this long is deleted
EXTENSIONS = (".zip", ".json", ".jsonl")
_ID = re.compile(r"[a-f0-9]{32}")


@dataclass
class Upload:
    id: str
    path: Path
    size: int
    touched: float


class Uploads:
    """The uploads of one state dir (one per gateway process)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._held: dict[str, Upload] = {}
        self._lock = threading.Lock()

    def start(self, name: str) -> Upload:
        """A new, empty upload for a file called `name` (its extension says what it is)."""
        clean = re.sub(r"[^A-Za-z0-9 ._-]+", "-", Path(name).name).strip(" .-")[-120:]
        if Path(clean).suffix.lower() not in EXTENSIONS or not Path(clean).stem:
            raise Invalid(f"must end in {', '.join(EXTENSIONS)} (a zip, conversations.json or a transcript)", "name")
        with self._lock:
            self._sweep()
            if len(self._held) >= MAX_OPEN:
                raise Conflict(
                    f"{MAX_OPEN} uploads are under way; finish or abandon one (it is dropped after {IDLE_S:.0f} s)",
                    {"maxOpen": MAX_OPEN},
                )
            up = Upload(secrets.token_hex(16), Path(), 0, time.monotonic())
            ensure_private_dir(self.folder / up.id)
            up.path = self.folder / up.id / clean
            os.close(os.open(up.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            self._held[up.id] = up
            return up

    def append(self, upload_id: str, offset: int, data: bytes) -> Upload:
        """Add a piece at `offset` (the bytes received so far)."""
        if len(data) > PIECE_BYTES:
            raise Invalid(f"a piece is at most {PIECE_BYTES} bytes decoded, got {len(data)}", "data")
        with self._lock:
            self._sweep()
            up = self._get(upload_id)
            if offset != up.size:
                raise Invalid(f"must be {up.size}, the bytes received so far (pieces go in order, once)", "offset")
            if up.size + len(data) > MAX_BYTES:
                self._drop(up)
                raise Invalid(f"the upload would pass {MAX_BYTES} bytes, the most one may be: it was dropped", "data")
            with open(up.path, "ab") as fh:
                fh.write(data)
            up.size += len(data)
            up.touched = time.monotonic()
            return up

    def take(self, upload_id: str) -> Upload:
        """The finished upload, to import (then `done`): no more pieces go into it."""
        with self._lock:
            up = self._get(upload_id)
            del self._held[up.id]
            return up

    def done(self, up: Upload) -> None:
        shutil.rmtree(up.path.parent, ignore_errors=True)

    def _get(self, upload_id: str) -> Upload:
        up = self._held.get(upload_id) if _ID.fullmatch(upload_id) else None
        if up is None:
            raise NotFound(f"no upload {upload_id!r} (finished, abandoned for {IDLE_S:.0f} s, or never started)")
        return up

    def _drop(self, up: Upload) -> None:
        self._held.pop(up.id, None)
        self.done(up)

    def _sweep(self) -> None:
        """Delete uploads left alone too long, and files of uploads no process holds (a gateway that died)."""
        cutoff = time.monotonic() - IDLE_S
        for up in [u for u in self._held.values() if u.touched < cutoff]:
            self._drop(up)
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return
        wall_cutoff = time.time() - IDLE_S
        for name in names:
            if name in self._held:
                continue
            path = self.folder / name
            try:
                stale = max((p.stat().st_mtime for p in path.iterdir()), default=path.stat().st_mtime) < wall_cutoff
            except (FileNotFoundError, NotADirectoryError):
                stale = True
            if stale and path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            elif stale:
                path.unlink(missing_ok=True)
