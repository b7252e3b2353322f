"""The PostgreSQL engine's memory index: one per agent, shared by every gateway (PgMemoryIndex), and its parts.

    index.py     PgMemoryIndex (storage/base.py's MemoryIndex): open, signature reset, counts that follow
                 the agent's generation, searches
    store.py     the index as the memory pipeline writes it (memory/ports.py's IndexStore): files and chunk
                 rows under the agent's advisory lock, the bulk load's deferred GIN index, upkeep
    fulltext.py  tsvector search ranked BM25-like (ts_rank_cd × idf)
    fts_index.py the GIN index of the chunks' tsvectors, dropped for a first bulk load and built after it
    vector_search.py  vector search in the gateway's memory (storage/vectors/: the matrix, the ANN graph)
                 over `memory_vectors`, the store of record; exact SQL for a small index
    vectors.py   pgvector's `vector` as the gateway reads and writes it (text, the binary codec)
    chunks.py    the chunk and vector rows: COPY of a sync's new ones
    reader.py    the chunk rows a search shows, and their stored vectors
    cache.py     the embedding cache table
    agent.py     the agent's lock and meta rows, PostgreSQL's text rule, the search filter

Its schema is the engine's (storage/postgres/db.py): the memory tables' migrations, the vector table's
(applied where the server has pgvector; v002 drops the HNSW indexes earlier versions made).
"""

from .index import PgMemoryIndex

__all__ = ["PgMemoryIndex"]
