"""Long-term memory: notes and transcripts indexed per agent, searched hybrid. The index is one SQLite file
per agent (the files engine) or rows in PostgreSQL shared by every gateway (`storage.url`); this package
thinks (what changed, chunks, vectors, fusion, snippets, re-ranking), the engines only store, through the
ports it declares, and it imports nothing of storage/.

    service.py        MemoryService, what the gateway uses: open/close, search → re-rank, get, status,
                      the sync triggers; engine-neutral, above the engine's MemoryIndex
                      (ports.py): storage/files/memory/ (SQLite) or storage/postgres/memory/
    ports.py          what memory asks of an engine: MemoryIndex, KeyedMemories and NoteRecord (declared in
                      notes/ports.py), and the narrow ports of the pipeline and the search (FileRows,
                      ChunkStore, the cache, FullText, VectorSearch, ChunkReader)
    sync.py           SyncOrchestrator (every trigger coalesces into one run at a time) and DirtyMarks
    watcher.py        watchfiles on the workspace's memory files, polling as a fallback
    signature.py      the index signature: the settings that, changed, make an index be built anew
    rerank.py         optional time decay and MMR, and the inputs they read
    present.py        how a hit is cited to a reader: date, conversation, where, how it stands
    secrets.py        secrets said in a conversation found and masked (memory.redactSecrets): pure
    layout.py         where memory lives in a workspace (root files, memory/, day files, keyed/, images/)
    index/            what the index holds and how it is written, on either engine:
        pipeline.py       IndexPipeline, incremental sync: stat → hash → chunk diff → embed → one
                          transaction a batch, through the engine's IndexStore; missing vectors filled
        changes.py        what changed: the scan against the index's signatures, the removal guard
        reading.py        a batch read, hashed and chunked; the diff of its chunks against the stored
        workers.py        worker processes for a large sync (and their watch); the heap trimmed after
        settings.py       IndexSettings (from the config) and SyncStats
        sources.py        which files are indexed, and safe reads for memory.get
        chunking.py       markdown and transcript chunks with line ranges
    search/           how it is searched:
        query.py          words, stems and FTS5 strings that cannot be injected
        fusion.py         reciprocal rank fusion (or weighted), spreading results over files
        snippets.py       segment scoring, snippets, the echo test, Exclude
        searcher.py       Searcher: candidates from the engine's full text and vectors, fused, re-ranked
        pruning.py        which words a big index searches (the rarest, within a postings budget)
        timeline.py       what is true now: the question's time, repeats folded, the latest statement first
        related.py        words people use for the same thing (boss/manager): a lighter second list
        backends.py       the built-in backend, QMD with fallback, circuit breaker
        qmd.py            the `qmd` command-line search tool as a backend
        stopwords.py      words dropped from queries
    notes/            memory the assistant writes: MemoryNotes (service.py) over keyed memories (files:
                      keyed.py, or PostgreSQL rows with the files as a mirror: storage/postgres/keyed.py;
                      their versions and trash), notes' versions (history.py), learnings, images and time
                      recall (timerecall.py), with front matter helpers
    embeddings/       providers (local WordLlama, OpenAI-compatible, none), registered by name
"""
