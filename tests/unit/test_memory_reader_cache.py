"""The files engine's reading connections keep larger page caches of their own (files/memory/index.py's
READER_CACHE_KB, VECTOR_READER_CACHE_KB; issue 46, ninth round) and do not map the file (a file cut short
under a mapping is SIGBUS: tests/system/hostile/test_index_truncated_while_serving.py). A reader's cache
lives across searches: what later syncs write — the file grown, rows replaced — must be what the next search
finds (SQLite drops a WAL reader's cache when another connection has committed)."""

from __future__ import annotations

from gateway.compose import memory_service
from gateway.memory.search.request import SearchRequest
from gateway.storage.files.engine import FilesStorage
from gateway.storage.files.memory.index import READER_CACHE_KB, VECTOR_READER_CACHE_KB
from tests.unit.test_memory import make_cfg, write

ALL = ("memory", "sessions")


async def _paths(svc, query: str, mode: str) -> list[str]:
    found = await svc.index.search(SearchRequest(query=query, k=5, mode=mode, sources=ALL))
    return [h.path for h in found.hits]


async def test_searches_through_the_readers_caches_find_what_each_sync_wrote(tmp_path):
    cfg = make_cfg(tmp_path)
    mem = cfg.workspace_dir / "memory"
    write(mem / "boat.md", "# Boat\n\nThe boat Loon is painted cream and moored at Ullapool.\n")
    svc = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)
    await svc.open()
    try:
        await svc.sync()
        await svc.warm()
        ix = svc.index
        assert ix.reader is not None and ix.vector_reader is not None and ix.writer is not None
        # (the pages copied from the WAL into the file, as its checkpoint does every 32 MiB written)
        await ix.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert await _paths(svc, "boat Loon cream", "fts") == ["memory/boat.md"]
        assert (await _paths(svc, "boat Loon cream", "vector"))[0] == "memory/boat.md"
        assert await ix.reader.scalar("PRAGMA cache_size") == -READER_CACHE_KB
        assert await ix.vector_reader.scalar("PRAGMA cache_size") == -VECTOR_READER_CACHE_KB
        for db in (ix.reader, ix.vector_reader, ix.writer):
            assert await db.scalar("PRAGMA mmap_size") == 0, "no connection maps the file"
        size = ix.db_path.stat().st_size

        # The file grows well past what the first searches cached; the note they found is rewritten.
        for i in range(120):
            write(mem / f"log-{i:03}.md", f"# Log {i}\n\n" + f"harbour tide entry {i} with gulls and rope. " * 60)
        write(mem / "boat.md", "# Boat\n\nThe boat Loon was repainted forest green at Oban.\n")
        await svc.sync()
        await ix.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert ix.db_path.stat().st_size > 2 * size
        assert await _paths(svc, "cream Ullapool", "fts") == [], "the old text is gone from the index"
        assert await _paths(svc, "Loon forest green Oban", "fts") == ["memory/boat.md"]
        assert (await _paths(svc, "Loon repainted forest green", "vector"))[0] == "memory/boat.md"
        hits = await _paths(svc, "harbour tide entry 117 gulls", "hybrid")
        assert hits and hits[0] == "memory/log-117.md"
    finally:
        await svc.close()
