"""The memory features beyond search, for one agent: keyed memories, time recall, learnings, images.

`MemoryNotes(manager, workspace)` is what the `memory.*` methods (methods/memory.py) and
`jarvis memory …` (gateway/cli/notes.py) call. Files go to the agent's workspace (keyed.py, learnings.py,
images.py describe the layouts; with PostgreSQL, keyed memories are rows and their files a mirror:
storage/postgres/keyed.py); every write re-indexes the memory files before it answers, so a change (or a delete)
shows in search at once.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ...errors import Invalid, NotFound, Unavailable
from ...timeutil import days_after, now_iso
from . import files, learnings, timerecall
from ..embeddings.base import EmbeddingError
from .history import NoteVersion
from .images import ImageStore, decode_image
from .keyed import check_category
from ..search.request import SearchRequest

V = TypeVar("V", NoteVersion, "Version")


def _pick(versions: list[V], version: int, whose: str) -> V:
    """Version `version` of `versions`, or Invalid naming the ones kept."""
    for v in versions:
        if v.version == version:
            return v
    kept = ", ".join(str(v.version) for v in versions)
    raise Invalid(f"{whose} no version {version}; the versions kept are {kept}", field="version")


if TYPE_CHECKING:  # pragma: no cover
    from ..service import MemoryService
    from .keyed import Version


class MemoryNotes:
    def __init__(self, manager: "MemoryService", workspace: Path, history_dir: Path):
        self.mem = manager
        self.workspace = workspace
        # Keyed memories: the engine's (files in the workspace, or rows in PostgreSQL with the files as a mirror).
        self.keyed = manager.keyed
        self.images = ImageStore(workspace)
        # Notes: the engine's (the folder with memory.write's versions beside it, or rows it mirrors).
        self.notes = manager.notes

    async def _reindex(self) -> None:
        """Bring the index up to date with the memory files now (coalesces with other syncs)."""
        await self.mem.sync_memory()

    # ---- notes as files (a notes browser and editor) ---------------------------------------------------
    async def files(self) -> dict:
        return {"files": await asyncio.to_thread(files.list_files, self.workspace, self.notes.by_name)}

    async def write(self, path: str, content: str, by: str = "", principal: str | None = None) -> dict:
        res = await self.notes.write(files.writable_path(path), content, by, principal)
        await self._reindex()
        return res

    async def note_versions(self, path: str, version: int | None) -> dict:
        """memory.history {path}: the versions of a note the record keeps (any of MEMORY.md, memory.md,
        LEARNINGS.md, memory/**/*.md, written by memory.write or not, deleted or not), newest first (without
        their text); `current` marks the one that is its text now (none for a deleted note). With
        `version`, that one whole."""
        rel = files.recorded_path(path)
        # current() first: it takes in an edit by hand not yet recorded (a version of its own), which the
        # list read after it then holds.
        now = await self.notes.current(rel) if version is None else None
        versions = await self.notes.versions(rel)
        if not versions:
            raise NotFound(f"{rel} has no versions: it was never written and does not exist", {"path": rel})
        if version is None:
            return {
                "path": rel,
                "versions": [{**v.brief(), "current": v.version == now} for v in reversed(versions)],
            }
        return {"path": rel, "version": _pick(versions, version, f"{rel} has").full()}

    async def restore_note(self, path: str, version: int, by: str, principal: str | None = None) -> dict:
        """memory.restore {path, version}: that version's text written again (a new version) — any note
        the record keeps, any text it took (up to memory.maxFileBytes or memory.write's cap, the larger)."""
        found = (await self.note_versions(path, version))["version"]
        rel = files.recorded_path(path)
        limit = max(self.mem.cfg.max_file_bytes, files.MAX_NOTE_BYTES)  # what a sync or memory.write took
        res = await self.notes.write(rel, found["content"], by, principal, limit=limit)
        await self._reindex()
        return {**res, "restoredFrom": version}

    # ---- keyed memories ------------------------------------------------------------------------------
    async def set(self, key: str, value: str, category: str | None, by: str = "", principal: str | None = None) -> dict:
        entry, replaced, moved = await self.keyed.set(key, value, category, by, principal)
        await self._reindex()
        out = {**entry.full(), "replaced": replaced}
        if moved:
            out["movedFrom"] = moved
        return out

    async def get(self, key: str) -> dict:
        try:
            return (await self.keyed.get(key)).full()
        except NotFound as exc:
            trashed = next((c for c in await self.keyed.trash() if c.entry.key == key), None)
            if trashed is None:
                raise
            until = self._expires(trashed.deleted)
            raise NotFound(
                f"no memory with key {key!r}: it is in the trash (deleted {trashed.deleted}"
                + (f", kept until {until}" if until else "")
                + f"); bring it back with memory.restore {{key}} (jarvis memory restore {key})",
                {**(exc.data or {}), "key": key, "inTrash": True},
            ) from None

    def _expires(self, deleted: str | None) -> str | None:
        return days_after(deleted, self.mem.cfg.trash_days)

    async def delete(self, key: str, by: str = "") -> dict:
        entry = await self.keyed.delete(key, by)
        await self._reindex()
        return {
            "deleted": True,
            "key": entry.key,
            "category": entry.category,
            "path": entry.path,
            "trashed": True,
            "expiresAt": self._expires(now_iso()),
        }

    async def history(self, key: str) -> dict:
        """memory.history {key}: every kept version, newest first; `current` marks the value it has now
        (none when the key is in the trash)."""
        versions = await self.keyed.history(key)
        live = await self.keyed.find(key) is not None
        return {
            "key": key,
            "trashed": not live,
            "versions": [{**v.full(), "current": live and i == 0} for i, v in enumerate(versions)],
        }

    async def restore(self, key: str, version: int | None, by: str, principal: str | None = None) -> dict:
        """memory.restore {key, version}: that version's value (and category) written again, a new
        version; without `version`, the key brought back from the trash whole."""
        if version is None:
            entry = await self.keyed.untrash(key)
            await self._reindex()
            return {**entry.full(), "restored": True}
        found = _pick(list(reversed(await self.keyed.history(key))), version, f"memory {key!r} has")
        out = await self.set(key, found.value, found.category, by, principal)
        return {**out, "restoredFrom": version}

    async def trash(self, limit: int, offset: int) -> dict:
        """memory.trash: what memory.delete put there, the most recently deleted first."""
        trashed = await self.keyed.trash()
        return {
            "memories": [
                {**c.brief(), "expiresAt": self._expires(c.deleted)} for c in trashed[offset : offset + limit]
            ],
            "total": len(trashed),
        }

    async def purge(self, keys: list[str] | None) -> dict:
        return {"purged": await self.keyed.purge(keys)}

    async def list(self, category: str | None, limit: int, offset: int) -> dict:
        return await self.keyed.list(category, limit, offset)

    def _vectors_available(self) -> bool:
        return bool(self.mem.index.status()["vector"]["available"])

    async def similar(
        self, key: str, k: int, min_score: float = 0.0, sources: builtins.list[str] | None = None
    ) -> dict:
        entry = await self.keyed.get(key)
        query = " ".join([key.replace("-", " ").replace("_", " ").replace(".", " "), entry.value])[:2000]
        mode = "vector" if self._vectors_available() else "hybrid"
        res = await self.mem.search(
            SearchRequest(
                query=query, k=min(50, k + 5), min_score=min_score, sources=tuple(sources or ["memory"]), mode=mode
            )
        )
        results = [r for r in res["results"] if r["path"] != entry.path][:k]
        out = {
            "key": key,
            "path": entry.path,
            "results": results,
            "mode": res.get("mode", mode),
            "embeddings": res.get("embeddings"),
        }
        if res.get("degraded"):
            out["degraded"] = res["degraded"]
        return out

    # ---- time recall -----------------------------------------------------------------------------------
    async def recall_period(
        self,
        from_: str | None,
        to: str | None,
        category: str | None,
        query: str | None,
        k: int,
        min_score: float = 0.0,
        sources: builtins.list[str] | None = None,
    ) -> dict:
        start, stop = timerecall.period(from_, to)
        if category is not None:
            check_category(category)
        srcs = tuple(sources or ("memory", "sessions"))

        def newest_first() -> list:
            units = timerecall.collect(
                self.workspace, self.mem.sessions_dir, start, stop, category, srcs, self.mem.cfg.max_file_bytes
            )
            units.sort(key=lambda u: u.ts, reverse=True)
            return units

        # Reading, sorting and ranking every unit of a long period is real CPU: all of it in threads.
        units = await asyncio.to_thread(newest_first)
        query = (query or "").strip() or None
        vectors = None
        degraded = None
        if query and units:
            vectors, degraded = await self._embed_units(query, units[: timerecall.MAX_EMBED])
        results = await asyncio.to_thread(timerecall.rank, units, query, k, min_score, vectors)
        out: dict[str, Any] = {
            "results": results,
            "from": timerecall.to_iso(start) if start else None,
            "to": timerecall.to_iso(stop),
            "matched": len(units),
        }
        if degraded:
            out["degraded"] = degraded
        return out

    async def _embed_units(
        self, query: str, units: builtins.list
    ) -> tuple[tuple[np.ndarray, np.ndarray] | None, str | None]:
        p = self.mem.provider
        if p is None or not p.enabled:
            return None, "no embedding provider; ranked by words only"
        try:
            vecs = await p.embed([query] + [u.text[: timerecall.EMBED_CHARS] for u in units])
        except Exception as exc:  # the provider failing must not fail recall: words still rank
            return None, f"embedding provider unavailable ({exc}); ranked by words only"
        vecs = np.asarray(vecs, dtype=np.float32)
        return (vecs[0], vecs[1:]), None

    # ---- learnings -------------------------------------------------------------------------------------
    async def learn(self, category: str, text: str) -> dict:
        out = await asyncio.to_thread(learnings.learn, self.workspace, category, text)
        await self._reindex()
        return out

    # ---- images ----------------------------------------------------------------------------------------
    def _max_image_bytes(self) -> int:
        return int(getattr(self.mem.cfg, "image_max_bytes", 5 * 1024 * 1024))

    async def set_image(self, key: str, image: str, description: str | None) -> dict:
        data, mime = await asyncio.to_thread(decode_image, image, self._max_image_bytes())
        out = await asyncio.to_thread(self.images.set, key, data, mime, description)
        await self._reindex()
        return out

    async def get_image(self, key: str) -> dict:
        return await asyncio.to_thread(self.images.get, key)

    async def search_image(self, image: str, k: int) -> dict:
        """Stored images ranked by cosine similarity to `image`, embedded by a multimodal provider.

        Stored images' vectors live in the embedding cache under ("image:" + sha256 of the bytes), so
        each image is embedded once; a pruned entry is simply embedded again."""
        query, mime = await asyncio.to_thread(decode_image, image, self._max_image_bytes())
        p = self.mem.provider
        if p is None or not getattr(p, "multimodal", False) or not hasattr(p, "embed_images"):
            name = f"{p.name} ({p.model})" if p is not None and p.name else "none"
            raise Unavailable(
                f"the configured embedding provider {name} cannot embed images; image search needs a "
                f"multimodal embedding provider (memory.embeddings.multimodal = true on an openai "
                f"endpoint serving a vision embedding model)",
                retryable=False,
            )

        def load() -> tuple[list, list[str]]:
            stored = self.images.all()
            return stored, ["image:" + hashlib.sha256(data).hexdigest() for _, data in stored]

        stored, hashes = await asyncio.to_thread(load)
        max_entries = self.mem.cfg.embeddings.cache_max_entries
        try:
            cache = self.mem.index.embedding_cache(p.name, p.model, max_entries)
            vectors = await cache.get_many(hashes)
            missing = [(h, data, s["mimeType"]) for h, (s, data) in zip(hashes, stored) if h not in vectors]
            if missing:
                fresh = await p.embed_images([(data, m) for _, data, m in missing])
                new = {h: v for (h, _, _), v in zip(missing, fresh)}
                await cache.put_many(new)
                vectors.update(new)
            q = (await p.embed_images([(query, mime)]))[0]
        except EmbeddingError as exc:
            raise Unavailable(
                f"image embedding failed: {exc}",
                retryable=exc.retryable,
                retry_after_ms=int(exc.retry_after * 1000) if exc.retry_after else None,
            ) from None
        scored = sorted(
            ((float(np.dot(vectors[h], q)), s) for h, (s, _) in zip(hashes, stored)), key=lambda t: t[0], reverse=True
        )
        results = [{**s, "score": round(max(0.0, min(1.0, cos)), 6)} for cos, s in scored[:k]]
        return {"results": results, "embeddings": {"provider": p.name, "model": p.model}}
