"""The files engine's memory index: one SQLite file per agent (FilesMemoryIndex), and its parts.

index.py       FilesMemoryIndex (storage/base.py's MemoryIndex): connections, the swap gate, rebuild
               and recovery, counts, the ANN graph's warm-up
gate.py        many searches or one swap; the embedding cache read through the gate
store.py       the index as the memory pipeline writes it (memory/ports.py's IndexStore): files rows,
               chunk rows with their full-text rows, vectors — the SQL of a sync
(full text: storage/fts5.py, FTS5 search (BM25), shared with the PostgreSQL engine's mirror)
reader.py      the chunk rows a search shows, and their stored vectors
vectors.py     vector storage and exact KNN (sqlite-vec, or storage/vectors/' in-memory float32 / int8
               matrix and HNSW graph, shared with the PostgreSQL engine, over `chunks_vec`)
cache.py       the embedding cache table
db.py          aiosqlite connections, driver choice (sqlite-vec), corruption detection
migrations.py  the schema as named, ordered migrations
rebuild.py     the users lock, fresh build + swap, setting a damaged file aside
"""

from .index import FilesMemoryIndex

__all__ = ["FilesMemoryIndex"]
