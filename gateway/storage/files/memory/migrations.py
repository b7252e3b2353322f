"""The memory index schema: named, ordered migrations recorded in the `migrations` table.

    meta              key → value (index signature, FTS tokenizer, vector backend and dims, generation, last sync,
                      the highest chunk id ever given)
    files             one row per indexed file: size, mtime, content hash
    chunks            text, path, source, session key, 1-based inclusive line range, sha256, message spans,
                      whether its vector is stored (`embedded`), context (neighbouring text, search only),
                      date (when it was said; NULL: the file's mtime);
                      (path, line range, sha256) is unique: a chunk's identity
    chunks_fts        FTS5 over chunks.text and chunks.context (external content; the indexer keeps it in
                      step, in bulk: one INSERT … SELECT per batch — see `store.SqliteChunks.write`/`delete_chunks`)
    chunks_vec        vec0 (cosine; `source` and `session_key` metadata columns; VEC_CHUNK_SIZE vectors a
                      chunk) — or, without
                      sqlite-vec, a plain table of float32 BLOBs searched with numpy. (Indexes made before
                      have `source` as a partition key, which halves insert speed; queries are the same.)
    embedding_cache   (provider, model, text hash) → vector; pruned oldest-first
    ledger            statements about the person (memory/ledger/): subject, value, when said, evidence
                      (path, lines, text), source, ending; a file's rows replaced when it is indexed

Migrations are applied in order, each once, inside a transaction. A migration may take parameters from
the `SchemaParams` (the FTS tokenizer); the vector table needs the embedding dimensions, which may only
be known after the first embedding, so it is created by `ensure_vector_table` and recorded in `meta`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable

from ....timeutil import now_iso
from ...fts5 import TOKENIZERS
from .db import Database


FTS_HASHSIZE = 32 * 1024 * 1024
# Vectors per vec0 chunk (its default is 1,024: a 1 MiB blob of 256-d vectors). A point lookup walks the
# blob's overflow pages, so smaller chunks make the int8 matrix's exact re-score and the MMR lookups
# cheaper (50 lookups at 118k rows: 6.3 → 1.1 ms), and a full read (loading the matrix) too (1.0 →
# 0.6 s); sqlite-vec's own KNN, which only indexes under MATRIX_THRESHOLD vectors use, pays ~20%.
# Indexes made before keep theirs (the table is created once).
VEC_CHUNK_SIZE = 64
# meta: the highest chunk id ever given; ids are never given twice (vectors kept by id stay right).
CHUNK_ID_HIGH = "chunk_id_high"


@dataclass(frozen=True)
class SchemaParams:
    tokenizer: str = "unicode61"


async def _m001_meta(db: Database, p: SchemaParams) -> None:
    await db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")


async def _m002_files(db: Database, p: SchemaParams) -> None:
    await db.execute(
        """CREATE TABLE files (
            path TEXT PRIMARY KEY,
            source TEXT NOT NULL,
            session_key TEXT,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            hash TEXT NOT NULL,
            chunks INTEGER NOT NULL DEFAULT 0,
            indexed_at TEXT NOT NULL
        )"""
    )


async def _m003_chunks(db: Database, p: SchemaParams) -> None:
    await db.execute(
        """CREATE TABLE chunks (
            id INTEGER PRIMARY KEY,
            path TEXT NOT NULL,
            source TEXT NOT NULL,
            session_key TEXT,
            start_line INTEGER NOT NULL,
            end_line INTEGER NOT NULL,
            hash TEXT NOT NULL,
            text TEXT NOT NULL,
            spans TEXT,
            embedded INTEGER NOT NULL DEFAULT 0
        )"""
    )
    await db.execute("CREATE INDEX chunks_path ON chunks(path)")
    await db.execute("CREATE INDEX chunks_missing ON chunks(embedded) WHERE embedded = 0")


async def _m004_fts(db: Database, p: SchemaParams) -> None:
    tok = TOKENIZERS[p.tokenizer]
    await db.execute(
        f"CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id', tokenize='{tok}')"
    )
    await db.execute(
        "CREATE TRIGGER chunks_fts_ai AFTER INSERT ON chunks BEGIN "
        "INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text); END"
    )
    await db.execute(
        "CREATE TRIGGER chunks_fts_ad AFTER DELETE ON chunks BEGIN "
        "INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); END"
    )
    await db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('fts_tokenizer', ?)", (p.tokenizer,))


async def _m005_embedding_cache(db: Database, p: SchemaParams) -> None:
    await db.execute(
        """CREATE TABLE embedding_cache (
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            hash TEXT NOT NULL,
            dims INTEGER NOT NULL,
            embedding BLOB NOT NULL,
            PRIMARY KEY (provider, model, hash)
        )"""
    )


async def _m006_chunk_context(db: Database, p: SchemaParams) -> None:
    """Chunks get a `context` (neighbouring text) that full-text search sees in a second, lighter column."""
    tok = TOKENIZERS[(await get_meta(db, "fts_tokenizer")) or p.tokenizer]
    await db.execute("ALTER TABLE chunks ADD COLUMN context TEXT NOT NULL DEFAULT ''")
    await db.execute("DROP TRIGGER IF EXISTS chunks_fts_ai")
    await db.execute("DROP TRIGGER IF EXISTS chunks_fts_ad")
    await db.execute("DROP TABLE IF EXISTS chunks_fts")
    await db.execute(
        f"CREATE VIRTUAL TABLE chunks_fts USING fts5(text, context, content='chunks', content_rowid='id', "
        f"tokenize='{tok}')"
    )
    await db.execute(
        "CREATE TRIGGER chunks_fts_ai AFTER INSERT ON chunks BEGIN "
        "INSERT INTO chunks_fts(rowid, text, context) VALUES (new.id, new.text, new.context); END"
    )
    await db.execute(
        "CREATE TRIGGER chunks_fts_ad AFTER DELETE ON chunks BEGIN "
        "INSERT INTO chunks_fts(chunks_fts, rowid, text, context) "
        "VALUES ('delete', old.id, old.text, old.context); END"
    )
    await db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")


async def _m007_fts_vocab(db: Database, p: SchemaParams) -> None:
    """Per-term document counts, so searches can skip words that are in most chunks."""
    await db.execute("CREATE VIRTUAL TABLE chunks_fts_rows USING fts5vocab(chunks_fts, 'row')")


async def _m008_fts_bulk(db: Database, p: SchemaParams) -> None:
    """No per-row FTS triggers: each row's trigger ran in its own statement savepoint, and FTS5 flushes its
    pending terms at every savepoint, so each chunk became its own index segment (~90 µs of merging per
    chunk). The indexer now adds and deletes FTS rows with one INSERT … SELECT per batch. (So a version
    from before this migration must not write to an index that has it: upgrade gateway and CLI together;
    `jarvis memory sync --force` after a downgrade.)"""
    await db.execute("DROP TRIGGER IF EXISTS chunks_fts_ai")
    await db.execute("DROP TRIGGER IF EXISTS chunks_fts_ad")


async def _m009_fts_hashsize(db: Database, p: SchemaParams) -> None:
    """FTS5 keeps a transaction's new terms in memory and writes them as one index segment at commit, or
    earlier whenever they outgrow `hashsize` (1 MiB by default). A sync batch holds several MiB of text,
    so it left several small segments, each merged again later; 32 MiB makes it one (−10% FTS work)."""
    await db.execute(f"INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('hashsize', {FTS_HASHSIZE})")


async def _m010_chunk_identity(db: Database, p: SchemaParams) -> None:
    """A chunk is one (path, line range, hash): unique, so no race between two writers (the gateway and
    a `jarvis memory` command, each sure the file was new) can store it twice. Copies a race left
    behind are dropped first (the oldest row of each stays, with its full-text and vector rows). The
    unique index starts with `path`, so it replaces the path index."""
    dups = [
        r[0]
        for r in await db.fetchall(
            "SELECT id FROM chunks WHERE id NOT IN "
            "(SELECT min(id) FROM chunks GROUP BY path, start_line, end_line, hash) ORDER BY id"
        )
    ]
    if dups:
        await delete_chunks(db, "id", dups)
        gen = int(await get_meta(db, "generation", "0") or 0) + 1
        await set_meta(db, "generation", str(gen))
    await db.execute("CREATE UNIQUE INDEX chunks_identity ON chunks(path, start_line, end_line, hash)")
    await db.execute("DROP INDEX IF EXISTS chunks_path")


async def _m011_chunk_date(db: Database, p: SchemaParams) -> None:
    """When a chunk was said (ISO 8601 UTC; NULL: its file's modification time stands in), so that every
    search hit is dated. Filled by the rebuild that the chunker's new version causes."""
    await db.execute("ALTER TABLE chunks ADD COLUMN date TEXT")


async def _m012_ledger(db: Database, p: SchemaParams) -> None:
    """The ledger of statements about the person (memory/ledger/), by the file each was said in. Filled
    by the rebuild that the ledger's version in the index signature causes."""
    await db.execute(
        """CREATE TABLE ledger (
            id INTEGER PRIMARY KEY,
            path TEXT NOT NULL,
            subject TEXT NOT NULL,
            value TEXT NOT NULL,
            said TEXT NOT NULL,
            start_line INTEGER NOT NULL,
            end_line INTEGER NOT NULL,
            text TEXT NOT NULL,
            source TEXT NOT NULL,
            ending INTEGER NOT NULL DEFAULT 0
        )"""
    )
    await db.execute("CREATE INDEX ledger_path ON ledger(path)")
    await db.execute("CREATE INDEX ledger_subject ON ledger(subject)")


async def _m013_chunk_id_high(db: Database, p: SchemaParams) -> None:
    """The highest chunk id ever given (meta `chunk_id_high`), so that no id is given again once the
    highest chunks are deleted (store.SqliteChunks.write): an index made before starts from its highest
    stored id."""
    top = await db.scalar("SELECT max(id) FROM chunks", default=0)
    await set_meta(db, CHUNK_ID_HIGH, str(int(top)))


Migration = Callable[[Database, SchemaParams], Awaitable[None]]

MIGRATIONS: list[tuple[str, Migration]] = [
    ("001_meta", _m001_meta),
    ("002_files", _m002_files),
    ("003_chunks", _m003_chunks),
    ("004_chunks_fts", _m004_fts),
    ("005_embedding_cache", _m005_embedding_cache),
    ("006_chunk_context", _m006_chunk_context),
    ("007_fts_vocab", _m007_fts_vocab),
    ("008_fts_bulk", _m008_fts_bulk),
    ("009_fts_hashsize", _m009_fts_hashsize),
    ("010_chunk_identity", _m010_chunk_identity),
    ("011_chunk_date", _m011_chunk_date),
    ("012_ledger", _m012_ledger),
    ("013_chunk_id_high", _m013_chunk_id_high),
]


async def migrate(db: Database, params: SchemaParams) -> list[str]:
    """Apply pending migrations in order; returns the names applied."""
    await db.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    done = {r[0] for r in await db.fetchall("SELECT name FROM migrations")}
    applied = []
    for name, fn in MIGRATIONS:
        if name in done:
            continue
        async with db.transaction():
            await fn(db, params)
            await db.execute("INSERT INTO migrations(name, applied_at) VALUES (?, ?)", (name, now_iso()))
        applied.append(name)
    return applied


async def delete_chunks(db: Database, column: str, values: list) -> None:
    """Delete the chunks whose `column` ("id" or "path") is one of `values`, with their full-text rows
    (inside the caller's transaction; their vectors go by the chunks_vec_ad trigger). One statement per
    500 values: FTS5 flushes its pending terms at every statement savepoint, so per-row statements would
    each leave an index segment."""
    assert column in ("id", "path")
    for i in range(0, len(values), 500):
        part = list(values[i : i + 500])
        where = f"{column} IN ({','.join('?' * len(part))})"
        await db.execute(
            "INSERT INTO chunks_fts(chunks_fts, rowid, text, context) "
            f"SELECT 'delete', id, text, context FROM chunks WHERE {where}",
            part,
        )
        await db.execute(f"DELETE FROM chunks WHERE {where}", part)


async def get_meta(db: Database, key: str, default: str | None = None) -> str | None:
    row = await db.fetchone("SELECT value FROM meta WHERE key = ?", (key,))
    return row[0] if row else default


async def set_meta(db: Database, key: str, value: str) -> None:
    await db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))


async def vector_table(db: Database) -> tuple[str, int] | None:
    """(backend, dims) of the existing vector table, or None when there is none yet."""
    backend = await get_meta(db, "vec_backend")
    dims = await get_meta(db, "vec_dims")
    if not backend or not dims:
        return None
    return backend, int(dims)


async def ensure_vector_table(db: Database, backend: str, dims: int) -> None:
    """Create the vector table for `dims` (call inside a transaction). `backend`: sqlite-vec | numpy."""
    existing = await vector_table(db)
    if existing is not None:
        if existing != (backend, dims):
            raise RuntimeError(f"vector table is {existing}, wanted {(backend, dims)}; the index needs a rebuild")
        return
    if backend == "sqlite-vec":
        await db.execute(
            f"CREATE VIRTUAL TABLE chunks_vec USING vec0(chunk_id INTEGER PRIMARY KEY, "
            f"embedding float[{int(dims)}] distance_metric=cosine, source TEXT, session_key TEXT, "
            f"chunk_size={VEC_CHUNK_SIZE})"
        )
    else:
        await db.execute(
            "CREATE TABLE chunks_vec (chunk_id INTEGER PRIMARY KEY, source TEXT NOT NULL, "
            "session_key TEXT NOT NULL, embedding BLOB NOT NULL)"
        )
    await db.execute(
        "CREATE TRIGGER chunks_vec_ad AFTER DELETE ON chunks WHEN old.embedded = 1 BEGIN "
        "DELETE FROM chunks_vec WHERE chunk_id = old.id; END"
    )
    await set_meta(db, "vec_backend", backend)
    await set_meta(db, "vec_dims", str(int(dims)))
