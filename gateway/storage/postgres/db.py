"""The schema of the PostgreSQL database several gateways share (`storage.url`): its tables, their
migrations, and applying them. The connection itself (pool, liveness, notifications) is instance.py's
`Postgres`; the SQL helpers the stores share are sqlutil.py's.

Tables (named, ordered migrations, recorded in `jarvis_migrations` like the SQLite index's):

    sessions           (agent_id, session_key) → label, created_at, updated_at, message_count, line_count
    transcript_lines   (agent_id, session_key, seq) → line: the session's JSONL lines, append-only
    idempotency        (agent_id, session_key, idem_key) → run_id, expires_at
    runs               (agent_id, session_key) → run_id, instance_id: the one active run per session
    event_payloads     notification payloads too big for NOTIFY (8000 bytes), kept a minute
    memory_*           each agent's memory index: files, chunks (tsvector), meta, embedding cache, and
                       vectors (pgvector: VECTOR_MIGRATIONS, applied where the server has it; no vector
                       index: the gateway searches them in memory, memory/vector_search.py); see gateway/storage/postgres/memory/
    keyed_memories     (agent_id, key) → category, value, created, updated, deleted, version, trashed_at,
                       trashed_by: memory.set and friends; the workspace files are each gateway's mirror
                       (storage/postgres/keyed.py)
    keyed_versions     (agent_id, key, version) → category, value, at, by_door, principal: what each
                       keyed memory was (memory.history)
    sessions_trash,    deleted sessions (sessions.delete) with deleted_at, and their lines: moved here
    transcript_trash   whole, and back by sessions.restore; purged after memory.trashDays
    notes, note_*      each agent's notes, their versions and deletions (note_schema.py, notes.py)

"""

from __future__ import annotations

import asyncpg
import structlog

from .note_schema import NOTES_MIGRATION, NOTES_SQL, OLD_DELETIONS_SQL, TOMBSTONES_SQL
from .sqlutil import lock_key
from .vector_migrations import DROP_HNSW, STRAY_HNSW, VECTOR_MIGRATIONS  # what needs pgvector (v001 on)

log = structlog.get_logger("gateway.storage")


MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_sessions",
        """
        CREATE TABLE sessions (
            agent_id text NOT NULL,
            session_key text NOT NULL,
            label text,
            created_at text NOT NULL,
            updated_at text NOT NULL,
            message_count integer NOT NULL DEFAULT 0,
            line_count bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (agent_id, session_key)
        );
        CREATE INDEX sessions_by_update ON sessions (agent_id, updated_at DESC, session_key DESC);
        CREATE TABLE transcript_lines (
            agent_id text NOT NULL,
            session_key text NOT NULL,
            seq bigint NOT NULL,
            line text NOT NULL,
            PRIMARY KEY (agent_id, session_key, seq),
            FOREIGN KEY (agent_id, session_key) REFERENCES sessions ON DELETE CASCADE
        );
    """,
    ),
    (
        "0002_runs_and_idempotency",
        """
        CREATE TABLE runs (
            agent_id text NOT NULL,
            session_key text NOT NULL,
            run_id text NOT NULL,
            instance_id text NOT NULL,
            started_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (agent_id, session_key)
        );
        CREATE TABLE idempotency (
            agent_id text NOT NULL,
            session_key text NOT NULL,
            idem_key text NOT NULL,
            run_id text NOT NULL,
            expires_at timestamptz NOT NULL,
            PRIMARY KEY (agent_id, session_key, idem_key)
        );
        CREATE TABLE event_payloads (
            id bigserial PRIMARY KEY,
            payload text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        );
    """,
    ),
    # The memory index shared by every gateway (gateway/storage/postgres/memory/). Vectors live in
    # `memory_vectors`, made with the `vector` extension when a gateway first needs it (VECTOR_MIGRATIONS),
    # so that a server without pgvector still serves sessions and full-text search.
    (
        "0003_memory_index",
        """
        CREATE TABLE memory_files (
            agent_id text NOT NULL,
            path text NOT NULL,
            source text NOT NULL,
            session_key text,
            size bigint NOT NULL,
            mtime_ns bigint NOT NULL,
            hash text NOT NULL,
            chunks integer NOT NULL,
            indexed_at text NOT NULL,
            PRIMARY KEY (agent_id, path)
        );
        CREATE TABLE memory_chunks (
            id bigserial PRIMARY KEY,
            agent_id text NOT NULL,
            path text NOT NULL,
            source text NOT NULL,
            session_key text,
            start_line integer NOT NULL,
            end_line integer NOT NULL,
            hash text NOT NULL,
            text text NOT NULL,
            spans text,
            context text,
            embedded boolean NOT NULL DEFAULT false,
            tsv tsvector GENERATED ALWAYS AS (
                setweight(to_tsvector('english'::regconfig, text), 'A')
                || setweight(to_tsvector('english'::regconfig, coalesce(context, '')), 'D')) STORED
        );
        CREATE INDEX memory_chunks_by_path ON memory_chunks (agent_id, path);
        CREATE INDEX memory_chunks_unembedded ON memory_chunks (agent_id, id) WHERE NOT embedded;
        CREATE INDEX memory_chunks_fts ON memory_chunks USING gin (tsv);
        CREATE TABLE memory_meta (
            agent_id text NOT NULL,
            key text NOT NULL,
            value text NOT NULL,
            PRIMARY KEY (agent_id, key)
        );
        CREATE TABLE memory_embedding_cache (
            provider text NOT NULL,
            model text NOT NULL,
            hash text NOT NULL,
            dims integer NOT NULL,
            embedding bytea NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (provider, model, hash)
        );
    """,
    ),
    # Keyed memories (memory.set/get/delete/list): rows are the record, workspace files a mirror per
    # gateway (storage/postgres/keyed.py). A delete leaves a tombstone (deleted = true); every write counts
    # `version` up, which a mirror's front matter names.
    (
        "0004_keyed_memories",
        """
        CREATE TABLE keyed_memories (
            agent_id text NOT NULL,
            key text NOT NULL,
            category text NOT NULL,
            value text NOT NULL,
            created text NOT NULL,
            updated text NOT NULL,
            deleted boolean NOT NULL DEFAULT false,
            version bigint NOT NULL DEFAULT 1,
            PRIMARY KEY (agent_id, key)
        );
        CREATE INDEX keyed_memories_by_updated ON keyed_memories (agent_id, updated DESC) WHERE NOT deleted;
    """,
    ),
    # A chunk's tsvector (~1.9 KB with its context) went out of line, uncompressed, as the row's largest
    # value: ranking then fetched it from the TOAST table for every candidate (~10 µs a row). Kept in the
    # row (compressed) instead, with the text and context moved out first, full-text search is ~2.5x
    # faster. Rows written before keep their storage until rewritten (a re-index).
    (
        "0005_memory_tsvector_in_row",
        """
        ALTER TABLE memory_chunks ALTER COLUMN tsv SET STORAGE MAIN;
    """,
    ),
    # A session's own model and system prompt (sessions.create / sessions.update); NULL: the configured ones.
    (
        "0006_session_settings",
        """
        ALTER TABLE sessions ADD COLUMN model text, ADD COLUMN system_prompt text;
    """,
    ),
    # When a chunk was said (ISO 8601 UTC; NULL: its file's modification time stands in): every search hit
    # is dated. Filled by the re-index the chunker's new version causes.
    (
        "0007_memory_chunk_date",
        """
        ALTER TABLE memory_chunks ADD COLUMN date text;
    """,
    ),
    # Principals (gateway/principals.py): one set for every gateway on the database, the token's hash only;
    # `changed` moves on every change but a token's use, so a gateway polling max(changed) sees revocations.
    # The audit log: who wrote or deleted what, through which door (storage/postgres/principals.py).
    (
        "0008_principals_and_audit",
        """
        CREATE SEQUENCE principal_changes;
        CREATE TABLE principals (
            name text PRIMARY KEY,
            token_hash text NOT NULL UNIQUE,
            agents text[],
            scopes text[] NOT NULL,
            created text NOT NULL,
            expires text,
            revoked text,
            last_used text,
            changed bigint NOT NULL DEFAULT nextval('principal_changes')
        );
        CREATE TABLE audit (
            id bigserial PRIMARY KEY,
            at text NOT NULL,
            principal text NOT NULL,
            entry jsonb NOT NULL
        );
        CREATE INDEX audit_by_at ON audit (at);
    """,
    ),
    # Keyed memories keep their versions (every write: value, category, when, the door it came through,
    # who once principals exist), and a delete is a trash: the tombstone keeps its value and says when it
    # was trashed, until a purge empties it (storage/postgres/keyed.py).
    (
        "0009_keyed_versions_and_trash",
        """
        CREATE TABLE keyed_versions (
            agent_id text NOT NULL,
            key text NOT NULL,
            version bigint NOT NULL,
            category text NOT NULL,
            value text NOT NULL,
            at text NOT NULL,
            by_door text NOT NULL DEFAULT '',
            principal text,
            PRIMARY KEY (agent_id, key, version)
        );
        ALTER TABLE keyed_memories ADD COLUMN trashed_at text, ADD COLUMN trashed_by text NOT NULL DEFAULT '';
        CREATE INDEX keyed_memories_trash ON keyed_memories (agent_id, trashed_at) WHERE trashed_at IS NOT NULL;
    """,
    ),
    # Deleted sessions go to a trash: their row and lines move here whole (one transaction), and back on
    # a restore (storage/postgres/sessions.py).
    (
        "0010_session_trash",
        """
        CREATE TABLE sessions_trash (
            agent_id text NOT NULL,
            session_key text NOT NULL,
            label text,
            created_at text NOT NULL,
            updated_at text NOT NULL,
            message_count integer NOT NULL DEFAULT 0,
            line_count bigint NOT NULL DEFAULT 0,
            model text,
            system_prompt text,
            deleted_at text NOT NULL,
            PRIMARY KEY (agent_id, session_key)
        );
        CREATE TABLE transcript_trash (
            agent_id text NOT NULL,
            session_key text NOT NULL,
            seq bigint NOT NULL,
            line text NOT NULL,
            PRIMARY KEY (agent_id, session_key, seq),
            FOREIGN KEY (agent_id, session_key) REFERENCES sessions_trash ON DELETE CASCADE
        );
    """,
    ),
    # The ledger of statements about the person (memory/ledger/), by the file each was said in: a file's
    # rows are replaced whenever a sync indexes it (storage/postgres/memory/ledger.py).
    (
        "0011_memory_ledger",
        """
        CREATE TABLE memory_ledger (
            id bigserial PRIMARY KEY,
            agent_id text NOT NULL,
            path text NOT NULL,
            subject text NOT NULL,
            value text NOT NULL,
            said text NOT NULL,
            start_line integer NOT NULL,
            end_line integer NOT NULL,
            text text NOT NULL,
            source text NOT NULL,
            ending boolean NOT NULL DEFAULT false
        );
        CREATE INDEX memory_ledger_by_path ON memory_ledger (agent_id, path);
        CREATE INDEX memory_ledger_by_subject ON memory_ledger (agent_id, subject);
    """,
    ),
    # audit.list of one principal reads its newest rows by this index and stops at the LIMIT, however big
    # the table (the whole table's newest: the primary key, backwards).
    (
        "0012_audit_by_principal",
        """
        CREATE INDEX audit_by_principal ON audit (principal, id);
    """,
    ),
    (
        # /v1/responses kept (storage/postgres/responses.py): read and continued through any gateway.
        "0013_stored_responses",
        """
        CREATE TABLE stored_responses (
            id text PRIMARY KEY,
            seq bigserial NOT NULL,
            agent_id text NOT NULL,
            principal text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            size integer NOT NULL,
            body text NOT NULL
        );
        CREATE INDEX stored_responses_by_principal ON stored_responses (principal, seq);
        CREATE INDEX stored_responses_by_age ON stored_responses (created_at);
    """,
    ),
    (NOTES_MIGRATION, NOTES_SQL),  # notes as rows, each gateway's workspace folder a mirror (note_schema.py)
    # Full-text search on a big index takes a word's document count from the column's statistics when
    # ANALYZE found it common (storage/postgres/memory/fulltext.py) and counts the others. With the default
    # target (1,000 lexemes) a word past them can still be in 1.4% of all chunks (14,000 rows to count at a
    # million); with 10,000 lexemes, 0.12%. ANALYZE reads 300,000 rows then (7.5 s at 118,000 chunks).
    (
        "0015_memory_tsv_statistics",
        """
        ALTER TABLE memory_chunks ALTER COLUMN tsv SET STATISTICS 1000;
    """,
    ),
    ("0016_note_tombstones", TOMBSTONES_SQL),  # a note's deletion, kept (note_schema.py)
    ("0017_note_tombstones_of_old_deletions", OLD_DELETIONS_SQL),  # those made before 0016 (note_schema.py)
    # The database's identity, which a gateway's derived files record (the FTS5 mirror, a saved graph: a
    # file of another database is built again): made here too, not only with the vectors (v003), for a
    # gateway without embeddings or pgvector keeps an FTS5 mirror as well (memory/fts_file.py).
    (
        "0018_jarvis_identity",
        """
        CREATE TABLE IF NOT EXISTS jarvis_identity (id text NOT NULL);
        INSERT INTO jarvis_identity(id) SELECT md5(random()::text || clock_timestamp()::text)
            WHERE NOT EXISTS (SELECT 1 FROM jarvis_identity);
    """,
    ),
    # One agent's chunks by id: the FTS5 mirror's catch-up (`agent_id = $1 AND id > $2 ORDER BY id`) and
    # sweep (`id BETWEEN`) read only that agent's rows, not the primary key's walk past other agents'.
    (
        "0019_memory_chunks_by_id",
        """
        CREATE INDEX IF NOT EXISTS memory_chunks_by_id ON memory_chunks (agent_id, id);
    """,
    ),
]


async def migrate(conn: asyncpg.Connection) -> list[str]:
    """Apply the migrations not yet recorded, in order, each in its transaction; return their names.
    Several gateways starting at once take turns (an advisory lock held for the transaction)."""
    applied: list[str] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key("jarvis:migrations"))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS jarvis_migrations "
            "(name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["name"] for r in await conn.fetch("SELECT name FROM jarvis_migrations")}
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            await conn.execute(sql)
            await conn.execute("INSERT INTO jarvis_migrations(name) VALUES ($1)", name)
            applied.append(name)
    return applied


async def migrate_vectors(pool: asyncpg.Pool) -> str | None:
    """Apply VECTOR_MIGRATIONS not yet recorded; None when vectors can be stored, else why not."""
    names = [name for name, _ in VECTOR_MIGRATIONS]
    try:
        async with pool.acquire() as conn:
            done = await conn.fetchval("SELECT count(*) FROM jarvis_migrations WHERE name = ANY($1::text[])", names)
            stray = await conn.fetchval(STRAY_HNSW)  # an older gateway of this database made it again
            if done == len(names) and not stray:
                return None
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key("jarvis:migrations"))
                applied = {r["name"] for r in await conn.fetch("SELECT name FROM jarvis_migrations")}
                for name, sql in VECTOR_MIGRATIONS:
                    if name not in applied:
                        await conn.execute(sql)
                        await conn.execute("INSERT INTO jarvis_migrations(name) VALUES ($1)", name)
                    elif name == DROP_HNSW and stray:
                        log.warning("memory_vectors_hnsw_dropped", note="gateways of one database upgrade together")
                        await conn.execute(sql)
    except asyncpg.PostgresError as exc:
        return f"pgvector is not available on the database server ({exc}); full-text search only"
    return None


async def pending(conn: asyncpg.Connection) -> list[str]:
    """The migrations not yet recorded (read only: nothing is created)."""
    done: set[str] = set()
    if await conn.fetchval("SELECT to_regclass('jarvis_migrations') IS NOT NULL"):
        done = {r["name"] for r in await conn.fetch("SELECT name FROM jarvis_migrations")}
    return [name for name, _ in MIGRATIONS if name not in done]
