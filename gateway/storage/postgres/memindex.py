"""The memory index in PostgreSQL, its parts: indexer, searcher, vectors (pgvector), embedding cache.

One index per agent, shared by every gateway; storage/postgres/memory.py puts the parts together.

Tables (migration 0003 in gateway/storage/postgres/db.py, all keyed by `agent_id`):

    memory_files            (agent_id, path) → source, session_key, size, mtime_ns, hash, chunks
    memory_chunks           id → agent_id, path, lines, hash, text, spans, context, embedded,
                            tsv (generated: the text at weight A, the context at weight D; GIN index)
    memory_meta             (agent_id, key) → value: index_signature, generation, last_sync_at
    memory_embedding_cache  (provider, model, hash) → dims, float32 bytes
    memory_vectors          chunk_id → agent_id, source, session_key, dims, embedding (pgvector `vector`;
                            made when a gateway first stores vectors, with an HNSW cosine index per
                            dimension count: `(embedding::vector(d)) vector_cosine_ops WHERE dims = d`)

The pipeline is the SQLite index's: PgIndexer scans, diffs by stat and hash, reads and chunks with the
Indexer's code and embeds through the cache; PgSearcher answers full text with `ts_rank_cd` and vectors
with `<=>` and hands both lists to the same fusion, re-rank and snippets (Searcher). Only the storage
differs. A sync holds a session-level advisory lock on the agent's key for its whole run, so two
gateways syncing one agent take turns and the second finds the work done (hashes unchanged).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import Any, Sequence

import asyncpg
import numpy as np
import orjson
import structlog

from ...timeutil import now_iso
from .db import lock_key
from ...memory.embeddings import EmbeddingError, EmbeddingProvider
from ...memory.embeddings.cache import drop_unusable
from ...memory.index.chunking import sha256
from ...memory.index.indexer import (
    BATCH_CHUNKS,
    Indexed,
    Indexer,
    IndexSettings,
    Progress,
    SyncStats,
    _Work,
    chunk_diff,
)
from ...memory.index.sources import MEMORY, SESSIONS, SIGNATURE_SQL, SourceFile, session_key_of, session_path
from ...memory.search.searcher import POSTINGS_BUDGET, PRUNE_MIN_CHUNKS, SearchOptions, Searcher, rarest_within_budget

log = structlog.get_logger("gateway.memory")

FTS_CONFIG = "english"
IDF_COUNT_CAP = 10_000
MAINTAIN_AFTER_FILES = 200  # a sync that changed this many files cleans up after itself (_maintain)
BULK_LOAD_FILES = 1024  # a first sync of this many files builds the HNSW index after loading (_defer_dims_index)


def agent_lock(agent_id: str) -> int:
    return lock_key(f"jarvis:memory:{agent_id}")


def vector_text(v: np.ndarray) -> str:
    """A vector in pgvector's text form ('[1,2,3]'): sent as text and cast, so no codec is needed."""
    return "[" + ",".join(f"{x:.8g}" for x in np.asarray(v, dtype=np.float32).tolist()) + "]"


def parse_vector(text: str) -> np.ndarray:
    return np.array(orjson.loads(text), dtype=np.float32)


def _pg_text(text: str) -> str:
    """`text` as PostgreSQL's `text` can hold it: a NUL character (a file or message may hold one) becomes
    U+FFFD, one character for one, so the spans that index into the text stay right."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def tsquery_lexemes(terms: Sequence[str]) -> list[str]:
    """Each term as a quoted to_tsquery lexeme (`'word'`), to be OR-ed: the terms are `\\w+` words
    (query.py), and quotes and backslashes are dropped anyway, so user text never becomes tsquery
    syntax (`&`, `|`, `!`, `:*`, `<->`, parentheses)."""
    parts = []
    for t in terms:
        t = t.replace("\\", "").replace("'", "")
        if t:
            parts.append("'" + t + "'")
    return list(dict.fromkeys(parts))


async def get_meta(db: Any, agent_id: str, key: str, default: str | None = None) -> str | None:
    v = await db.fetchval("SELECT value FROM memory_meta WHERE agent_id = $1 AND key = $2", agent_id, key)
    return default if v is None else v


async def set_meta(db: Any, agent_id: str, key: str, value: str) -> None:
    await db.execute(
        "INSERT INTO memory_meta(agent_id, key, value) VALUES ($1, $2, $3) "
        "ON CONFLICT (agent_id, key) DO UPDATE SET value = excluded.value",
        agent_id,
        key,
        value,
    )


async def bump_generation(conn: asyncpg.Connection, agent_id: str) -> None:
    await conn.execute(
        "INSERT INTO memory_meta(agent_id, key, value) VALUES ($1, 'generation', '1') "
        "ON CONFLICT (agent_id, key) DO UPDATE SET value = (memory_meta.value::bigint + 1)::text",
        agent_id,
    )


# ---- the vector table (pgvector) ------------------------------------------------------------------------
async def ensure_vector_schema(pool: asyncpg.Pool) -> str | None:
    """The `vector` extension and `memory_vectors` (when an agent's index opens); None when ready, else
    why vectors cannot be stored."""
    try:
        async with pool.acquire() as conn:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key("jarvis:memory-schema"))
                await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                await conn.execute("""
                    CREATE TABLE IF NOT EXISTS memory_vectors (
                        chunk_id bigint PRIMARY KEY REFERENCES memory_chunks(id) ON DELETE CASCADE,
                        agent_id text NOT NULL,
                        source text NOT NULL,
                        session_key text,
                        dims integer NOT NULL,
                        embedding vector NOT NULL
                    )""")
                await conn.execute(
                    "CREATE INDEX IF NOT EXISTS memory_vectors_by_agent ON memory_vectors (agent_id, dims)"
                )
    except asyncpg.PostgresError as exc:
        return f"pgvector is not available on the database server ({exc}); full-text search only"
    return None


async def ensure_dims_index(conn: asyncpg.Connection, dims: int, bulk: bool = False) -> None:
    """The HNSW cosine index for vectors of `dims` dimensions, made when such vectors are first stored
    (an expression index per dimension count: a `vector` column without a fixed size cannot have one).
    `bulk`: built over many rows, with more memory for the build (the graph fits, no spilling)."""
    if not 0 < dims <= 2000:  # HNSW's limit for `vector`; larger ones are searched exactly
        return
    # Already there (the usual case, at every agent's open): no wait on the schema lock, which another
    # gateway's index build may hold for minutes.
    if await conn.fetchval(f"SELECT to_regclass('memory_vectors_hnsw_{dims}') IS NOT NULL"):
        return
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key("jarvis:memory-schema"))
        if bulk:
            await conn.execute("SET LOCAL maintenance_work_mem = '512MB'")
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS memory_vectors_hnsw_{dims} ON memory_vectors "
            f"USING hnsw ((embedding::vector({dims})) vector_cosine_ops) WHERE dims = {dims}"
        )


def _stale_mirrors(items: list[tuple[SourceFile, int | None]]) -> set[str]:
    """Blocking: the paths whose file has fewer lines than `lines` (or whose session is gone: None)."""
    out = set()
    for sf, lines in items:
        if lines is None:
            out.add(sf.path)
            continue
        try:
            with open(sf.abs, "rb") as f:
                have = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        except OSError:
            out.add(sf.path)
            continue
        if have < lines:
            out.add(sf.path)
    return out


def _filter(where: list[str], params: list[Any], sources: tuple[str, ...], session_key: str | None, table: str) -> None:
    """Add the source and session conditions of a search (`table`: the column prefix, e.g. "c.")."""
    if len(sources) == 1:
        params.append(sources[0])
        where.append(f"{table}source = ${len(params)}")
    if session_key is not None:
        params.append(session_key)
        where.append(f"({table}source = 'memory' OR {table}session_key = ${len(params)})")


class PgVectorStore:
    """Nearest chunks by cosine distance (`<=>`) through the HNSW index of the provider's dims."""

    matrix_form = None  # searched in the database, never in an in-process matrix
    ann = None  # nor in a usearch graph: pgvector's HNSW index is the approximate search here
    iterative: bool | None = None  # whether the server's pgvector has hnsw.iterative_scan

    def __init__(self, pool: asyncpg.Pool, agent_id: str, dims: int):
        self.pool, self.agent_id, self.dims = pool, agent_id, int(dims)
        self.unusable: set[int] = set()  # chunk ids whose stored vector is zero (VectorStore.unusable)

    async def warm(self, generation: str, count: int) -> None:
        return None

    async def close(self) -> None:
        return None  # nothing loads in the background

    async def knn(
        self, q: np.ndarray, n: int, sources: tuple[str, ...], session_key: str | None, generation: str, count: int
    ) -> list[tuple[int, float]]:
        d = self.dims
        where, params = ["agent_id = $2", f"dims = {d}"], [vector_text(q), self.agent_id]
        _filter(where, params, sources, session_key, "")
        params.append(int(n))
        sql = (
            f"SELECT chunk_id, embedding::vector({d}) <=> $1::text::vector({d}) AS dist FROM memory_vectors "
            f"WHERE {' AND '.join(where)} ORDER BY dist LIMIT ${len(params)}"
        )
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL hnsw.ef_search = {min(1000, max(40, 2 * int(n)))}")
                if PgVectorStore.iterative is not False:
                    # Other agents' vectors share the HNSW graph: keep scanning until n of this agent's
                    # pass the filter (pgvector 0.8; an older one returns what ef_search finds).
                    try:
                        async with conn.transaction():
                            await conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
                        PgVectorStore.iterative = True
                    except asyncpg.PostgresError:
                        PgVectorStore.iterative = False
                rows = await conn.fetch(sql, *params)
        # A zero vector stored before providers' answers were checked has a NaN distance: passed over.
        self.unusable = {int(r[0]) for r in rows if r[1] is None or not math.isfinite(r[1])}
        return [(int(r[0]), 1.0 - float(r[1])) for r in rows if r[1] is not None and math.isfinite(r[1])]


class PgSearcher(Searcher):
    """Searcher over an agent's rows in PostgreSQL: full text by tsvector, vectors by pgvector; fusion,
    re-rank and snippets are Searcher's."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        agent_id: str,
        provider: EmbeddingProvider,
        opts: SearchOptions,
        vectors: PgVectorStore | None,
        vector_problem: str | None,
        hidden_sessions: set[str] | None = None,
    ):
        # Not Searcher.__init__: it binds a SQLite connection's scratch table.
        from collections import OrderedDict

        self.db = pool  # type: ignore[assignment]
        self.pool, self.agent_id = pool, agent_id
        self.provider, self.opts = provider, opts
        self.vectors, self.vector_problem = vectors, vector_problem  # type: ignore[assignment]
        self.hidden_sessions = hidden_sessions if hidden_sessions is not None else set()
        self._qcache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.total_chunks = 0

    async def prune_common(self, terms: Sequence[str]) -> list[str]:
        return list(terms)  # fts() prunes by the document counts it fetches for the idf anyway

    async def fts(
        self, terms: Sequence[str], n: int, sources: tuple[str, ...], session_key: str | None
    ) -> list[tuple[int, float]]:
        """(id, -score) best first, negated so that fusion reads it as it reads BM25 (lower is better).
        The score is BM25-like: Σ over the query's words of idf(word) × ts_rank_cd(word), the rank with
        the text at weight 1 and the context at `contextWeight`, normalised by the chunk's length and
        saturating (flags 1|32), so a rare word counts for more than a common one, as in BM25."""
        lexemes = tsquery_lexemes(terms)
        if not lexemes:
            return []
        counts = await self._doc_counts(lexemes)
        # Ranking reads every matching chunk's tsvector (~4 µs a row, per word), so on a big index the
        # rarest words are searched and common ones skipped past a postings budget, as FTS5's search does
        # (Searcher.prune_common): they would move the ranking least, and still count in the re-ranking.
        if len(lexemes) > 1 and self.total_chunks >= PRUNE_MIN_CHUNKS:
            keep = rarest_within_budget(counts, self.total_chunks)
            lexemes, counts = [lexemes[i] for i in keep], [counts[i] for i in keep]
        idf = self._idf(counts)
        w = float(self.opts.context_weight)
        m = len(lexemes)
        params: list[Any] = [self.agent_id, " | ".join(lexemes), [w, 0.0, 0.0, 1.0], *lexemes, *idf]
        # One tsquery parameter per word, not an array unnested per row: each is a constant of the
        # statement, so the GIN index serves the match and the statement is the same for every query
        # of as many words (prepared once).
        score = " + ".join(
            f"${4 + m + k}::float8 * ts_rank_cd($3::float4[], c.tsv, to_tsquery('{FTS_CONFIG}', ${4 + k}), 33)"
            for k in range(m)
        )
        where = ["c.agent_id = $1", f"c.tsv @@ to_tsquery('{FTS_CONFIG}', $2)"]
        _filter(where, params, sources, session_key, "c.")
        params.append(int(n))
        sql = (
            f"SELECT c.id, -(1e-6 + {score}) AS r FROM memory_chunks c "
            f"WHERE {' AND '.join(where)} ORDER BY r, c.id LIMIT ${len(params)}"
        )
        rows = await self.pool.fetch(sql, *params)
        return [(int(r[0]), float(r[1])) for r in rows]

    async def _doc_counts(self, lexemes: list[str]) -> list[int]:
        """How many of the agent's chunks hold each word, counted up to IDF_COUNT_CAP (past it a word is
        common, and counting further would cost a scan)."""
        # Counted far enough for pruning to tell a word over the postings budget on any index size.
        cap = max(IDF_COUNT_CAP, int(POSTINGS_BUDGET * self.total_chunks) + 1)
        counts = ", ".join(
            f"(SELECT count(*) FROM (SELECT 1 FROM memory_chunks c WHERE c.agent_id = $1 AND "
            f"c.tsv @@ to_tsquery('{FTS_CONFIG}', ${k + 2}) LIMIT {cap}) s{k})"
            for k in range(len(lexemes))
        )
        row = await self.pool.fetchrow(f"SELECT {counts}", self.agent_id, *lexemes)
        return [int(row[k]) for k in range(len(lexemes))]

    def _idf(self, counts: list[int]) -> list[float]:
        """BM25's idf of each word from its document count among the agent's chunks."""
        total = max(self.total_chunks, 1)
        return [math.log(1.0 + (max(total, df) - df + 0.5) / (df + 0.5)) for df in counts]

    async def _chunk_rows(self, ids: list[int]) -> list[tuple]:
        rows = await self.pool.fetch(
            "SELECT c.id, c.path, c.source, c.session_key, c.start_line, c.end_line, c.text, c.spans, c.context, "
            "c.date, f.mtime_ns FROM memory_chunks c LEFT JOIN memory_files f ON f.agent_id = c.agent_id "
            "AND f.path = c.path WHERE c.id = ANY($1::bigint[]) AND c.agent_id = $2",
            list(ids),
            self.agent_id,
        )
        return [tuple(r) for r in rows]


class PgEmbeddingCache:
    """The embedding cache as a table shared by every gateway and agent (same contract as EmbeddingCache)."""

    def __init__(self, pool: asyncpg.Pool, provider: str, model: str, max_entries: int, cached: bool = True):
        self.pool, self.provider, self.model, self.max_entries = pool, provider, model, max_entries
        self.cached = cached
        self.enabled = cached and max_entries > 0

    async def get_many(self, hashes: list[str], db: Any = None) -> dict[str, np.ndarray]:
        if not self.enabled or not hashes:
            return {}
        rows = await self.pool.fetch(
            "SELECT hash, embedding FROM memory_embedding_cache WHERE provider = $1 AND model = $2 "
            "AND hash = ANY($3::text[])",
            self.provider,
            self.model,
            list(dict.fromkeys(hashes)),
        )
        return drop_unusable({r[0]: np.frombuffer(r[1], dtype=np.float32) for r in rows})

    async def put_many(self, items: dict[str, np.ndarray], conn: Any = None) -> None:
        if not self.enabled or not items:
            return
        await (conn or self.pool).executemany(
            "INSERT INTO memory_embedding_cache(provider, model, hash, dims, embedding) VALUES ($1, $2, $3, $4, $5) "
            "ON CONFLICT (provider, model, hash) DO UPDATE SET dims = excluded.dims, embedding = excluded.embedding",
            [
                (self.provider, self.model, h, int(v.shape[0]), np.asarray(v, dtype=np.float32).tobytes())
                for h, v in items.items()
            ],
        )

    async def purge_unusable(self, conn: Any) -> int:
        if not self.enabled:
            return 0
        bad: list[str] = []
        last = ""
        while rows := await conn.fetch(  # a batch at a time: the cache may hold gigabytes of vectors
            "SELECT hash, embedding FROM memory_embedding_cache WHERE provider = $1 AND model = $2 "
            "AND hash > $3 ORDER BY hash LIMIT 4096",
            self.provider,
            self.model,
            last,
        ):
            last = rows[-1][0]
            found = {r[0]: np.frombuffer(r[1], dtype=np.float32) for r in rows}
            bad.extend(set(found) - set(drop_unusable(found)))
        if bad:
            await conn.execute(
                "DELETE FROM memory_embedding_cache WHERE provider = $1 AND model = $2 AND hash = ANY($3::text[])",
                self.provider,
                self.model,
                bad,
            )
        return len(bad)

    async def count(self) -> int:
        return int(await self.pool.fetchval("SELECT count(*) FROM memory_embedding_cache"))

    async def prune(self, conn: Any = None) -> int:
        db = conn or self.pool
        gone = 0
        if not self.cached:
            r = await db.execute(
                "DELETE FROM memory_embedding_cache WHERE provider = $1 AND model = $2", self.provider, self.model
            )
            gone = int(r.split()[-1])
        excess = int(await db.fetchval("SELECT count(*) FROM memory_embedding_cache")) - max(self.max_entries, 0)
        if excess <= 0:
            return gone
        await db.execute(
            "DELETE FROM memory_embedding_cache WHERE ctid IN (SELECT ctid FROM memory_embedding_cache "
            "ORDER BY created_at LIMIT $1)",
            excess,
        )
        return gone + excess


class PgIndexer(Indexer):
    """Indexer's pipeline (scan, stat and hash diff, `_read_and_chunk`, embedding through the cache) with
    PostgreSQL writes: the rows of one batch of files in one transaction."""

    transcripts_are_sessions = False  # the sessions table decides which transcripts are gone

    def __init__(
        self, pool: asyncpg.Pool, agent_id: str, provider: EmbeddingProvider, settings: IndexSettings, vectors_ok: bool
    ):
        self.pool, self.agent_id, self.provider, self.s = pool, agent_id, provider, settings
        self.db = None  # type: ignore[assignment]
        self.cache = PgEmbeddingCache(
            pool,
            provider.name,
            provider.model,
            settings.cache_max_entries,  # type: ignore[assignment]
            provider.cached,
        )
        self.vectors = None
        self.vectors_ok = vectors_ok  # the vector table exists (pgvector on the server)
        self._dims_indexed: set[int] = set()  # dims whose HNSW index this indexer has seen to

    @property
    def embeds(self) -> bool:
        return self.provider.enabled and self.s.vector_backend != "none" and self.vectors_ok

    # ---- what the index holds (Indexer.compare's questions, asked of PostgreSQL) --------------------------
    @staticmethod
    def _where(memory: bool, sessions: bool | set[str]) -> tuple[str, list[Any]]:
        """The rows of memory_files a sync covers: a condition after `agent_id = $1`, and its arguments."""
        if sessions is not True and sessions:
            paths = [session_path(k) for k in sorted(sessions)]
            return ("(source = 'memory' OR path = ANY($2::text[]))" if memory else "path = ANY($2::text[])"), [paths]
        sources = [src for src, on in ((MEMORY, memory), (SESSIONS, sessions)) if on]
        return "source = ANY($2::text[])", [sources]

    async def _indexed(self, db: Any, memory: bool, sessions: bool | set[str]) -> Indexed:
        where, args = self._where(memory, sessions)
        signatures: set[str] = set()
        sources: set[str] = set()
        count = 0
        for source, n, sigs in await db.fetch(
            f"SELECT source, count(*), array_agg({SIGNATURE_SQL}) FILTER (WHERE source <> 'memory' OR size <= $3) "
            f"FROM memory_files WHERE agent_id = $1 AND {where} GROUP BY source",
            self.agent_id,
            *args,
            self.s.max_file_bytes,
        ):
            signatures.update(sigs or ())
            sources.add(source)
            count += n
        total = None
        if not (memory and sessions is True):
            total = int(
                await db.fetchval(
                    "SELECT count(*) FROM (SELECT 1 FROM memory_files WHERE agent_id = $1 LIMIT $2) AS t",
                    self.agent_id,
                    2 * count + 1,
                )
            )
        return Indexed(signatures, sources, count, total)

    async def _rows_of(self, db: Any, paths: list[str]) -> dict[str, tuple[int, int, str]]:
        rows = await db.fetch(
            "SELECT path, size, mtime_ns, hash FROM memory_files WHERE agent_id = $1 AND path = ANY($2::text[])",
            self.agent_id,
            paths,
        )
        return {r[0]: (r[1], r[2], r[3]) for r in rows}

    async def _paths_in_scope(self, db: Any, memory: bool, sessions: bool | set[str]) -> set[str]:
        where, args = self._where(memory, sessions)
        paths = await db.fetchval(
            f"SELECT array_agg(path) FROM memory_files WHERE agent_id = $1 AND {where}", self.agent_id, *args
        )
        return set(paths or ())

    async def _locked(self) -> Any:
        """A pool connection holding the agent's sync lock (session-level; the pool's reset on release
        drops it should the holder be cancelled before unlocking)."""
        conn = await self.pool.acquire()
        try:
            await conn.execute("SELECT pg_advisory_lock($1)", agent_lock(self.agent_id))
        except BaseException:
            await self.pool.release(conn)
            raise
        return conn

    async def _unlock(self, conn: Any) -> None:
        try:
            await conn.execute("SELECT pg_advisory_unlock($1)", agent_lock(self.agent_id))
        finally:
            await self.pool.release(conn)

    async def reset(self, signature: str) -> None:
        """Drop every row of the agent's index (a change of settings) and record the new signature."""
        conn = await self._locked()
        try:
            async with conn.transaction():
                await conn.execute("DELETE FROM memory_chunks WHERE agent_id = $1", self.agent_id)
                await conn.execute("DELETE FROM memory_files WHERE agent_id = $1", self.agent_id)
                await set_meta(conn, self.agent_id, "index_signature", signature)
                await bump_generation(conn, self.agent_id)
        finally:
            await self._unlock(conn)

    async def sync(
        self,
        *,
        force: bool = False,
        memory: bool = True,
        sessions: bool | set[str] = True,
        progress: Progress | None = None,
    ) -> SyncStats:
        conn = await self._locked()
        try:
            return await self._sync(conn, force, memory, sessions, progress)
        finally:
            await self._unlock(conn)

    async def _sync(
        self, conn: Any, force: bool, memory: bool, sessions: bool | set[str], progress: Progress | None
    ) -> SyncStats:
        t0 = time.perf_counter()
        stats = SyncStats()
        agent = self.agent_id
        known, gone, todo = await self.compare(conn, memory, sessions, force, stats)
        if gone:
            # A transcript is gone when its session is, not when this gateway's mirror is missing (it
            # may not have caught up with a session made through another gateway yet).
            keys = [k for k in map(session_key_of, gone) if k]
            alive = (
                {
                    r[0]
                    for r in await conn.fetch(
                        "SELECT session_key FROM sessions WHERE agent_id = $1 AND session_key = ANY($2::text[])",
                        agent,
                        keys,
                    )
                }
                if keys
                else set()
            )
            gone = [p for p in gone if session_key_of(p) not in alive]
        if gone:
            async with conn.transaction():
                await conn.execute(
                    "DELETE FROM memory_chunks WHERE agent_id = $1 AND path = ANY($2::text[])", agent, gone
                )
                await conn.execute(
                    "DELETE FROM memory_files WHERE agent_id = $1 AND path = ANY($2::text[])", agent, gone
                )
                await bump_generation(conn, agent)
            stats.removed = len(gone)
            stats.changed = True
        todo = await self._skip_stale_mirrors(conn, todo, stats)
        total = len(todo)
        if progress and total:
            progress(0, total)
        done = 0
        deferred = await self._defer_dims_index(conn, total)
        # Indexer's pipeline (worker processes for a large sync, else one batch ahead in threads): the
        # next batches are prepared while PostgreSQL writes this one, in its own process.
        try:
            async with contextlib.aclosing(self._prepared(todo, known, force, stats)) as prepared:
                async for n, works, vecs, fresh in prepared:
                    await self._write_pg(conn, works, known, vecs, fresh, stats)
                    done += n
                    if progress:
                        progress(done, total)
        finally:
            if deferred is not None:
                await self._build_deferred_index(conn, deferred)
        if force and self.embeds:
            await self._drop_unusable_vectors_pg(conn, stats)
        if self.embeds and stats.embed_error is None:
            await self._fill_missing_pg(conn, stats)
        stats.missing_vectors = (
            int(await conn.fetchval("SELECT count(*) FROM memory_chunks WHERE agent_id = $1 AND NOT embedded", agent))
            if self.embeds
            else 0
        )
        async with conn.transaction():
            await set_meta(conn, agent, "last_sync_at", now_iso())
            await self.cache.prune(conn)
        if stats.indexed + stats.removed >= MAINTAIN_AFTER_FILES:
            await self._maintain(conn)
        stats.duration_ms = int((time.perf_counter() - t0) * 1000)
        return stats

    async def _defer_dims_index(self, conn: Any, files: int) -> int | None:
        """On a first large load (no vectors of the provider's dims stored yet, by any agent), drop their
        HNSW index and build it after the load (returns the dims; None: nothing deferred). Inserting into
        HNSW one vector at a time costs ~1.5 ms a vector on one core; building the index over the loaded
        rows costs a fraction of that and can use parallel workers. Searches in between are exact."""
        dims = int(self.provider.dims or 0)
        if files < BULK_LOAD_FILES or not self.embeds or not 0 < dims <= 2000:
            return None
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key("jarvis:memory-schema"))
            if await conn.fetchval("SELECT 1 FROM memory_vectors WHERE dims = $1 LIMIT 1", dims):
                return None
            await conn.execute(f"DROP INDEX IF EXISTS memory_vectors_hnsw_{dims}")
        self._dims_indexed.add(dims)
        return dims

    async def _build_deferred_index(self, conn: Any, dims: int) -> None:
        """The HNSW index dropped for a bulk load, built now: with more memory first, then (a server whose
        shared memory cannot take a parallel build of that size, as in a container's small /dev/shm)
        plainly. If that fails too, the next insert of such vectors, or the next open, tries again."""
        for bulk in (True, False):
            try:
                await ensure_dims_index(conn, dims, bulk=bulk)
                return
            except Exception as exc:  # best effort, from a `finally`: never hide the sync's own outcome
                log.warning("memory_vector_index_build_failed", dims=dims, bulk=bulk, error=str(exc))
        self._dims_indexed.discard(dims)

    async def _skip_stale_mirrors(self, conn: Any, todo: list[SourceFile], stats: SyncStats) -> list[SourceFile]:
        """Leave out transcripts whose local mirror has fewer lines than the session (another gateway
        appended and this one has not mirrored it yet: indexing it would replace newer chunks with
        older ones) or whose session is gone. The mirror's update schedules the session's sync again."""
        keys = [sf.session_key for sf in todo if sf.source == SESSIONS and sf.session_key]
        if not keys:
            return todo
        counts = {
            r[0]: int(r[1])
            for r in await conn.fetch(
                "SELECT session_key, line_count FROM sessions WHERE agent_id = $1 AND session_key = ANY($2::text[])",
                self.agent_id,
                keys,
            )
        }
        want = {sf.path: counts.get(sf.session_key or "") for sf in todo if sf.source == SESSIONS}
        stale = await asyncio.to_thread(_stale_mirrors, [(sf, want[sf.path]) for sf in todo if sf.path in want])
        if stale:
            stats.unchanged += len(stale)
            log.debug("memory_mirror_behind", files=len(stale))
        return [sf for sf in todo if sf.path not in stale]

    async def _maintain(self, conn: Any) -> None:
        """After a large sync: fold the GIN index's pending list into the index and refresh the planner's
        statistics. Until autovacuum gets there, freshly inserted rows sit in the pending list, which the
        planner prices so high that it scans every chunk of the agent instead of using the index."""
        try:
            await conn.execute("SELECT gin_clean_pending_list('memory_chunks_fts'::regclass)")
            await conn.execute("ANALYZE memory_chunks")
            if self.vectors_ok:
                await conn.execute("ANALYZE memory_vectors")
        except asyncpg.PostgresError as exc:  # not the tables' owner: autovacuum will do it
            log.info("memory_index_maintenance_skipped", error=str(exc))

    async def _prepare(
        self,
        batch: list[SourceFile],
        known: dict[str, tuple[int, int, str]],
        force: bool,
        stats: SyncStats,
        rdb: Any = None,
    ) -> tuple[list[_Work], dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Indexer._prepare with this agent's rows: its reads go through the pool, as the sync's own
        connection is writing the previous batch meanwhile (other files; the agent's lock keeps other
        gateways' syncs out)."""
        return await super()._prepare(batch, known, force, stats, None)

    async def _stored_keys(self, paths: list[str], rdb: Any) -> dict[str, set[tuple[int, int, str]]]:
        stored: dict[str, set[tuple[int, int, str]]] = {}
        if paths:
            for path, a, b, h in await self.pool.fetch(
                "SELECT path, start_line, end_line, hash FROM memory_chunks WHERE agent_id = $1 "
                "AND path = ANY($2::text[])",
                self.agent_id,
                paths,
            ):
                stored.setdefault(path, set()).add((a, b, h))
        return stored

    async def _insert_vectors(self, conn: Any, rows: list[tuple[int, str, str | None, np.ndarray]]) -> None:
        if not rows:
            return
        for dims in {int(v.shape[0]) for *_, v in rows} - self._dims_indexed:
            await ensure_dims_index(conn, dims)
            self._dims_indexed.add(dims)
        await conn.executemany(
            "INSERT INTO memory_vectors(chunk_id, agent_id, source, session_key, dims, embedding) "
            "VALUES ($1, $2, $3, $4, $5, $6::text::vector) ON CONFLICT (chunk_id) DO NOTHING",
            [(cid, self.agent_id, src, key, int(v.shape[0]), vector_text(v)) for cid, src, key, v in rows],
        )

    async def _write_pg(
        self,
        conn: Any,
        works: list[_Work],
        known: dict[str, tuple[int, int, str]],
        vecs: dict[str, np.ndarray],
        fresh: dict[str, np.ndarray],
        stats: SyncStats,
    ) -> None:
        agent = self.agent_id
        now = now_iso()
        n_new = sum(len(w.chunks or ()) for w in works)
        async with conn.transaction():
            ids = iter(
                [
                    r[0]
                    for r in await conn.fetch(
                        "SELECT nextval('memory_chunks_id_seq') FROM generate_series(1, $1)", n_new
                    )
                ]
                if n_new
                else []
            )
            touched, stale, inserts, vec_rows, file_rows = [], [], [], [], []
            for w in works:
                sf = w.sf
                if w.chunks is None:
                    touched.append((agent, sf.path, sf.size, sf.mtime_ns))
                    stats.unchanged += 1
                    continue
                current: dict[tuple[int, int, str], int] = {}
                if sf.path in known:
                    for cid, a, b, h in await conn.fetch(
                        "SELECT id, start_line, end_line, hash FROM memory_chunks WHERE agent_id = $1 AND path = $2",
                        agent,
                        sf.path,
                    ):
                        current[(a, b, h)] = cid
                gone, new = chunk_diff(current, w.chunks)
                stale.extend(gone)
                for c in new:
                    cid = next(ids)
                    v = vecs.get(c.text_hash)
                    inserts.append(
                        (
                            cid,
                            agent,
                            sf.path,
                            sf.source,
                            sf.session_key,
                            c.start_line,
                            c.end_line,
                            c.hash,
                            _pg_text(c.text),
                            orjson.dumps(c.spans).decode() if c.spans else None,
                            _pg_text(c.context),
                            v is not None,
                            c.date,
                        )
                    )
                    if v is not None:
                        vec_rows.append((cid, sf.source, sf.session_key, v))
                file_rows.append(
                    (agent, sf.path, sf.source, sf.session_key, sf.size, sf.mtime_ns, w.file_hash, len(w.chunks), now)
                )
                stats.indexed += 1
                stats.changed = True
            if touched:
                await conn.executemany(
                    "UPDATE memory_files SET size = $3, mtime_ns = $4 WHERE agent_id = $1 AND path = $2", touched
                )
            if stale:
                await conn.execute("DELETE FROM memory_chunks WHERE id = ANY($1::bigint[])", stale)
            if inserts:
                await conn.executemany(
                    "INSERT INTO memory_chunks(id, agent_id, path, source, session_key, start_line, end_line, hash, "
                    "text, spans, context, embedded, date) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                    inserts,
                )
            await self._insert_vectors(conn, vec_rows)
            if file_rows:
                await conn.executemany(
                    "INSERT INTO memory_files(agent_id, path, source, session_key, size, mtime_ns, hash, chunks, indexed_at) "
                    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (agent_id, path) DO UPDATE SET "
                    "source = excluded.source, session_key = excluded.session_key, size = excluded.size, "
                    "mtime_ns = excluded.mtime_ns, hash = excluded.hash, chunks = excluded.chunks, "
                    "indexed_at = excluded.indexed_at",
                    file_rows,
                )
            if fresh:
                await self.cache.put_many(fresh, conn)
            if stale or inserts or file_rows:
                # With the rows it counts: a reader that sees the new rows sees the new generation.
                await bump_generation(conn, agent)

    async def _drop_unusable_vectors_pg(self, conn: Any, stats: SyncStats) -> None:
        """Indexer._drop_unusable_vectors: pgvector refuses NaN, so only zero vectors can be stored."""
        await self.cache.purge_unusable(conn)
        async with conn.transaction():
            ids = [
                r[0]
                for r in await conn.fetch(
                    "DELETE FROM memory_vectors WHERE agent_id = $1 AND vector_norm(embedding) = 0 RETURNING chunk_id",
                    self.agent_id,
                )
            ]
            if ids:
                await conn.execute("UPDATE memory_chunks SET embedded = false WHERE id = ANY($1::bigint[])", ids)
                await bump_generation(conn, self.agent_id)
        if ids:
            log.warning("memory_unusable_vectors_dropped", chunks=len(ids), note="embedded again")
            stats.changed = True

    async def _fill_missing_pg(self, conn: Any, stats: SyncStats) -> None:
        """Give vectors to chunks stored without one (the provider was down when they were indexed)."""
        last = 0
        while True:
            rows = await conn.fetch(
                "SELECT id, source, session_key, text FROM memory_chunks WHERE agent_id = $1 AND NOT embedded "
                "AND id > $2 ORDER BY id LIMIT $3",
                self.agent_id,
                last,
                BATCH_CHUNKS,
            )
            if not rows:
                return
            last = rows[-1][0]
            try:
                vecs = await self._embed({sha256(r[3]): r[3] for r in rows}, stats)
            except EmbeddingError as exc:
                stats.embed_error = str(exc)
                stats.retry_after = exc.retry_after
                return
            todo = [(r[0], r[1], r[2], vecs[sha256(r[3])]) for r in rows if sha256(r[3]) in vecs]
            async with conn.transaction():
                await self._insert_vectors(conn, todo)
                await conn.execute(
                    "UPDATE memory_chunks SET embedded = true WHERE id = ANY($1::bigint[])", [t[0] for t in todo]
                )
                if todo:
                    await bump_generation(conn, self.agent_id)
            stats.changed = stats.changed or bool(todo)

    async def forget(self, paths: list[str], wait: bool = True) -> int | None:
        """Remove these files' chunks and rows now (for every gateway); returns how many files were known,
        or None (with `wait` False) when a sync of the agent holds its lock, on any gateway."""
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                if wait:
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", agent_lock(self.agent_id))
                elif not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", agent_lock(self.agent_id)):
                    return None
                await conn.execute(
                    "DELETE FROM memory_chunks WHERE agent_id = $1 AND path = ANY($2::text[])", self.agent_id, paths
                )
                r = await conn.execute(
                    "DELETE FROM memory_files WHERE agent_id = $1 AND path = ANY($2::text[])", self.agent_id, paths
                )
                n = int(r.split()[-1])
                if n:
                    await bump_generation(conn, self.agent_id)
                return n
