"""The PostgreSQL migrations that need pgvector (db.py applies them with `migrate_vectors`)."""

from __future__ import annotations

# What needs the `vector` extension (pgvector), which a server may lack: applied when an agent's memory
# index first opens with embeddings on (`migrate_vectors`) and recorded like the others; a server without
# pgvector leaves it pending and searches full text only. (Databases whose table an older version made
# outside the migrations record it on their next open: every statement is IF NOT EXISTS.)
DROP_HNSW = "v002_drop_hnsw"  # run again at open where a stray HNSW index is found (an older gateway's)
STRAY_HNSW = (
    "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() "
    "AND tablename = 'memory_vectors' AND indexname LIKE 'memory_vectors_hnsw_%')"
)

VECTOR_MIGRATIONS: list[tuple[str, str]] = [
    (
        "v001_memory_vectors",
        """
        CREATE EXTENSION IF NOT EXISTS vector;
        CREATE TABLE IF NOT EXISTS memory_vectors (
            chunk_id bigint PRIMARY KEY REFERENCES memory_chunks(id) ON DELETE CASCADE,
            agent_id text NOT NULL,
            source text NOT NULL,
            session_key text,
            dims integer NOT NULL,
            embedding vector NOT NULL
        );
        CREATE INDEX IF NOT EXISTS memory_vectors_by_agent ON memory_vectors (agent_id, dims);
    """,
    ),
    # The HNSW indexes of earlier versions (one per dimension count) dropped: the gateway searches vectors in
    # memory (memory/vector_search.py), and the index was ~2/3 of the server's work of a first sync.
    (
        DROP_HNSW,
        """
        DO $$
        DECLARE ix text;
        BEGIN
            FOR ix IN SELECT indexname FROM pg_indexes
                      WHERE schemaname = current_schema() AND tablename = 'memory_vectors'
                      AND indexname LIKE 'memory_vectors_hnsw_%'
            LOOP
                EXECUTE format('DROP INDEX IF EXISTS %I', ix);
            END LOOP;
        END $$;
    """,
    ),
    # An insertion order every write of a vector advances (a vector stored later for an older chunk id
    # too): the gateways' in-memory matrix and graph catch up by it (storage/vectors/), not by chunk id.
    # The database's identity, recorded in a saved graph: a graph of another database is rebuilt.
    (
        "v003_vector_seq",
        """
        CREATE SEQUENCE IF NOT EXISTS memory_vectors_seq;
        ALTER TABLE memory_vectors ADD COLUMN IF NOT EXISTS seq bigint NOT NULL
            DEFAULT nextval('memory_vectors_seq');
        CREATE INDEX IF NOT EXISTS memory_vectors_by_seq ON memory_vectors (agent_id, dims, seq);
        CREATE TABLE IF NOT EXISTS jarvis_identity (id text NOT NULL);
        INSERT INTO jarvis_identity(id) SELECT md5(random()::text || clock_timestamp()::text)
            WHERE NOT EXISTS (SELECT 1 FROM jarvis_identity);
    """,
    ),
]
