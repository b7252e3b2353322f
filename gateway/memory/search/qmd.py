"""QMD backend: the memory files searched by the `qmd` command-line tool (https://github.com/tobi/qmd).

QMD keeps its own index (a SQLite file under ~/.cache/qmd). The adapter relies on this documented CLI:

    qmd collection add <workspace> --name <collection> --mask "**/*.md"   once (an existing one is fine)
    qmd update                                                              after each of our syncs
    qmd embed                                                               after `update` (qmd.embed = true)
    qmd search  <query> --json -n <k> -c <collection>                       mode "fts" (BM25)
    qmd vsearch <query> --json -n <k> -c <collection>                       mode "vector"
    qmd query   <query> --json -n <k> -c <collection>                       mode "hybrid" (qmd.hybridCommand)

`--json` prints an array of `{docid, score, file, title, context?, snippet}` where `file` is the
collection-relative display path, often prefixed `qmd://<collection>/` or `<collection>/`, `score` is in
[0, 1], and `snippet` starts with a diff-style header `@@ -<line>,<count> @@ …` giving the 1-based line
range it shows. Assumptions where the documentation is silent, all handled defensively: a missing header
means line 1 (or an integer `line` field when present); a missing `score` means 0; items that are not
objects, lack `file`, or name a path outside the workspace's memory files are skipped; output that is
not a JSON array is an error. A query starting with `-` gets a leading space so that it cannot be read
as an option.

Every command runs with `asyncio.create_subprocess_exec` (never a shell), with a timeout after which the
process is killed; a missing executable, a non-zero exit, a timeout or unparseable output raise
`BackendError`, which the fallback composition (backends.py) turns into a built-in search.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path
from typing import Any

import orjson
import structlog

from ..hit import Found, Hit
from .backends import BackendError
from .request import SearchRequest
from ..layout import is_note

log = structlog.get_logger("gateway.memory")

_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? @@[^\n]*\n?")
MAX_OUTPUT = 16 << 20
SNIPPET_CHARS = 700
SUBCOMMANDS = {"fts": "search", "vector": "vsearch"}


class QmdBackend:
    name = "qmd"
    sources = ("memory",)

    def __init__(
        self,
        *,
        command: str,
        collection: str,
        workspace: Path,
        timeout_s: float,
        update_timeout_s: float,
        embed: bool,
        hybrid_command: str = "query",
        snippet_chars: int = 700,
    ):
        self.command, self.collection, self.workspace = command, collection, workspace
        self.timeout_s, self.update_timeout_s = timeout_s, update_timeout_s
        self.embed, self.hybrid_command = embed, hybrid_command
        self.snippet_chars = min(snippet_chars, SNIPPET_CHARS)
        self._collection_ready = False
        self._update_lock = asyncio.Lock()
        self.last_update_error: str | None = None

    # ---- running qmd -----------------------------------------------------------------------------
    async def run(self, *args: str, timeout_s: float | None = None) -> bytes:
        """stdout of `qmd <args>`; BackendError on a missing command, timeout or non-zero exit."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        try:
            proc = await asyncio.create_subprocess_exec(
                self.command,
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=MAX_OUTPUT,
            )
        except (FileNotFoundError, PermissionError) as exc:
            raise BackendError(f"cannot run {self.command!r}: {exc.strerror or exc}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout_s)
        except asyncio.TimeoutError:
            await _kill(proc)
            raise BackendError(f"qmd {args[0]} timed out after {timeout_s:g} s") from None
        except BaseException:
            await _kill(proc)
            raise
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip()[-300:] or out.decode(errors="replace").strip()[-300:]
            raise BackendError(f"qmd {args[0]} exited with {proc.returncode}" + (f": {tail}" if tail else ""))
        return out

    async def ensure_collection(self) -> None:
        if self._collection_ready:
            return
        try:
            await self.run(
                "collection",
                "add",
                str(self.workspace),
                "--name",
                self.collection,
                "--mask",
                "**/*.md",
                timeout_s=self.update_timeout_s,
            )
        except BackendError as exc:
            if "exist" not in str(exc).lower():  # "collection … already exists" is what we want
                raise
        self._collection_ready = True

    async def after_sync(self) -> None:
        """Bring QMD's index up to date with the files (`update`, then `embed`). Serialised."""
        async with self._update_lock:
            try:
                await self.ensure_collection()
                await self.run("update", timeout_s=self.update_timeout_s)
                if self.embed:
                    await self.run("embed", timeout_s=self.update_timeout_s)
                self.last_update_error = None
            except BackendError as exc:
                self.last_update_error = str(exc)
                log.warning("memory_qmd_update_failed", error=str(exc))

    # ---- search ---------------------------------------------------------------------------------
    async def search(self, req: SearchRequest) -> Found:
        """The memory files only (QMD holds no transcripts: `sources`, `session_key` and `exclude` are
        the built-in index's)."""
        sub = SUBCOMMANDS.get(req.mode, self.hybrid_command)
        q = " " + req.query if req.query.startswith("-") else req.query
        k = req.k + req.spare
        out = await self.run(sub, q, "--json", "-n", str(int(k)), "-c", self.collection)
        results = [
            r
            for r in parse_results(out, self.collection, self.workspace, self.snippet_chars)
            if r.score >= req.min_score
        ]
        results.sort(key=lambda r: -r.score)
        return Found(results[:k], req.mode, {"provider": "qmd", "model": sub})

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "qmd", "command": self.command, "collection": self.collection}
        if self.last_update_error:
            out["updateError"] = self.last_update_error
        return out


def parse_results(raw: bytes, collection: str, workspace: Path, snippet_chars: int = SNIPPET_CHARS) -> list[Hit]:
    """`qmd … --json` output → our hits. BackendError when it is not a JSON array."""
    text = raw.strip()
    if not text:
        return []  # some versions print nothing when nothing matched
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise BackendError(f"qmd returned output that is not JSON: {text[:80]!r}") from None
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        data = data["results"]
    if not isinstance(data, list):
        raise BackendError(f"qmd returned JSON that is not a list of results ({type(data).__name__})")
    out = []
    for item in data:
        r = _one(item, collection, workspace, snippet_chars)
        if r is not None:
            out.append(r)
    return out


def _one(item: Any, collection: str, workspace: Path, snippet_chars: int) -> Hit | None:
    if not isinstance(item, dict) or not isinstance(item.get("file"), str):
        return None
    path = workspace_path(item["file"], collection, workspace)
    if path is None:
        return None
    score = item.get("score")
    score = float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else 0.0
    score = 0.0 if score != score else max(0.0, min(1.0, score))  # NaN → 0
    snippet = item["snippet"] if isinstance(item.get("snippet"), str) else ""
    start, count = 1, None
    m = _HEADER.match(snippet)
    if m:
        start, count = int(m.group(1)), int(m.group(2)) if m.group(2) else None
        snippet = snippet[m.end() :]
    elif isinstance(item.get("line"), int) and not isinstance(item.get("line"), bool) and item["line"] > 0:
        start = item["line"]
    start = max(1, start)
    lines = snippet.rstrip("\n").count("\n") + 1 if snippet else 1
    end = start + max(1, count if count else lines) - 1
    return Hit(path, "memory", start, end, round(score, 6), snippet.strip("\n")[:snippet_chars])


def workspace_path(file: str, collection: str, workspace: Path) -> str | None:
    """QMD's display path → our workspace-relative memory path, or None when it is not one."""
    p = file.strip()
    if p.startswith("qmd://"):
        p = p[len("qmd://") :]
    if p.startswith(collection + "/"):
        p = p[len(collection) + 1 :]
    elif p.startswith(str(workspace).rstrip("/") + "/"):
        p = p[len(str(workspace).rstrip("/")) + 1 :]
    parts = p.split("/")
    if not p or p.startswith("/") or any(s in ("", ".", "..") for s in parts) or "\\" in p:
        return None
    return p if is_note(p) else None


async def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(Exception):
        await proc.wait()
