"""Finding and opening what the person hands the importer: a vendor's export zip, its `conversations.json`
alone, or the folder it was unzipped into. Blocking: run in a thread."""

from __future__ import annotations

import contextlib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

from .conversation import BadExport

CONVERSATIONS = "conversations.json"
MANIFEST = "manifest.json"  # a Jarvis export (archive.py) has one at its root


@dataclass
class Opened:
    name: str  # how errors name it: "export.zip:conversations.json", "conversations.json"
    stream: BinaryIO
    size: int  # bytes of JSON to read (uncompressed)


@contextlib.contextmanager
def open_conversations(path: Path, source: str) -> Iterator[Opened]:
    """The conversations JSON of an export at `path` (a .zip, a .json file, or a folder holding
    conversations.json). BadExport when there is none, or the zip cannot be read."""
    if path.is_dir():
        inner = path / CONVERSATIONS
        if not inner.is_file():
            raise BadExport(
                f"no {CONVERSATIONS} in this folder (unzip the {_vendor(source)} export here)", where=str(path)
            )
        with inner.open("rb") as fh:
            yield Opened(str(inner), fh, inner.stat().st_size)
        return
    if zipfile.is_zipfile(path):
        try:
            zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise BadExport(f"not a readable zip file ({exc})", where=path.name) from None
        with zf:
            names = zf.namelist()
            if MANIFEST in names and any(n.startswith("sessions/") for n in names):
                raise BadExport("this is a Jarvis export: import it with `jarvis import jsonl`", where=path.name)
            member = _member(names)
            if member is None:
                raise BadExport(
                    f"no {CONVERSATIONS} in this zip: is it {_vendor(source)}'s data export?", where=path.name
                )
            info = zf.getinfo(member)
            with zf.open(info) as fh:
                yield Opened(f"{path.name}:{member}", fh, info.file_size)  # type: ignore[arg-type]
        return
    with path.open("rb") as fh:
        yield Opened(path.name, fh, path.stat().st_size)


def _member(names: list[str]) -> str | None:
    """conversations.json at the zip's root, else in one folder (an export zipped again with its folder)."""
    if CONVERSATIONS in names:
        return CONVERSATIONS
    nested = sorted((n for n in names if n.endswith("/" + CONVERSATIONS)), key=lambda n: n.count("/"))
    return nested[0] if nested and nested[0].count("/") == 1 else None


def _vendor(source: str) -> str:
    return {"chatgpt": "ChatGPT", "claude": "Claude"}.get(source, source)
