"""A large sync reads, chunks, embeds and extracts the ledger's statements in worker processes
(`memory.sync.processes`): the index (and ledger) it writes is the one threads write, and a worker that
dies leaves the rest of the sync to threads."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import random
import shutil
import signal
import threading
from pathlib import Path

import numpy as np

from gateway.compose import memory_service
from gateway.memory.embeddings import EmbeddingError
from gateway.memory.embeddings.local import LocalEmbeddings
from gateway.config import load_config
from gateway.storage.files.memory.db import connect_sync, pick_driver
from gateway.memory.index.pipeline import PROCESS_MIN_FILES
from gateway.storage.files.engine import FilesStorage
from gateway.sessions.transcript import append_sync, header, message_record

WORDS = (
    "harbour sail keel mast rudder anchor tide chart compass lantern rope deck galley bunk "
    "winch cleat buoy squall ferry island lighthouse gull pier jetty"
).split()


def corpus(state: Path, notes: int) -> None:
    rng = random.Random(7)
    ws = state / "workspace" / "memory"
    for i in range(notes):
        d = ws / f"{i // 200:02d}"
        d.mkdir(parents=True, exist_ok=True)
        body = " ".join(rng.choice(WORDS) for _ in range(40))
        said = f"\nMy locker code is {1000 + i}.\n" if i % 50 == 0 else ""  # a statement for the ledger
        (d / f"n{i:04d}.md").write_text(f"# Note {i}\n\n{body}\n{said}")
    sessions = state / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    for s in range(3):
        key = f"s{s}"
        append_sync(
            sessions / f"{key}.jsonl",
            [header(key, "main")]
            + [
                message_record(
                    f"{key}-{m}",
                    "user" if m % 2 == 0 else "assistant",
                    f"I moved to Leeds in March, by the {WORDS[m]}."
                    if m % 4 == 0
                    else " ".join(rng.choice(WORDS) for _ in range(30)),
                )
                for m in range(20)
            ],
        )


async def index(state: Path, processes: int, progress=None, **settings) -> dict:
    cfg = load_config(
        {
            "stateDir": str(state),
            "memory.sync.onStart": False,
            "memory.sync.watch": False,
            "memory.sync.processes": processes,
            **settings,
        },
        env={},
    )
    mgr = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)
    await mgr.open()
    try:
        return await mgr.sync(progress=progress)
    finally:
        await mgr.close()


def statements(state: Path) -> list[tuple]:
    conn = connect_sync(state / "agents" / "main" / "memory.sqlite", pick_driver())
    try:
        return conn.execute(
            "SELECT subject, value, said, path, start_line, end_line, text, source, ending FROM ledger "
            "ORDER BY path, start_line, subject"
        ).fetchall()
    finally:
        conn.close()


def contents(state: Path) -> tuple[list[tuple], dict[tuple, np.ndarray]]:
    conn = connect_sync(state / "agents" / "main" / "memory.sqlite", pick_driver())
    try:
        chunks = conn.execute(
            "SELECT path, start_line, end_line, hash, text, context, embedded FROM chunks ORDER BY path, start_line"
        ).fetchall()
        rows = conn.execute(
            "SELECT c.path, c.start_line, c.end_line, c.hash, v.embedding FROM chunks c "
            "JOIN chunks_vec v ON v.chunk_id = c.id"
        ).fetchall()
        vectors = {tuple(row[:4]): np.frombuffer(row[4], dtype="<f4") for row in rows}
    finally:
        conn.close()
    return chunks, vectors


async def test_worker_processes_write_the_index_threads_write(tmp_path):
    threads, workers = tmp_path / "threads", tmp_path / "workers"
    corpus(threads, PROCESS_MIN_FILES + 100)
    shutil.copytree(threads, workers, symlinks=True)

    by_threads = await index(threads, processes=0)
    seen: set[int] = set()
    by_workers = await index(
        workers, processes=2, progress=lambda done, total: seen.update(p.pid for p in multiprocessing.active_children())
    )
    assert len(seen) == 2, "two worker processes prepared the batches"
    assert by_workers["indexed"] == by_threads["indexed"] == PROCESS_MIN_FILES + 103
    assert by_workers["chunksEmbedded"] == by_threads["chunksEmbedded"] > PROCESS_MIN_FILES

    chunks_t, vectors_t = contents(threads)
    chunks_w, vectors_w = contents(workers)
    assert chunks_w == chunks_t
    assert all(row[-1] == 1 for row in chunks_w), "every chunk has its vector"
    assert vectors_w.keys() == vectors_t.keys() and len(vectors_w) == len(chunks_w)
    for key, v in vectors_t.items():
        np.testing.assert_allclose(vectors_w[key], v, atol=1e-6)
    # The ledger's statements are extracted where the files are chunked: in the workers, the same ones.
    ledger_t = statements(threads)
    assert ledger_t == statements(workers)
    assert {r[0] for r in ledger_t} >= {"code:locker", "home"}, ledger_t[:3]
    assert sum(1 for r in ledger_t if r[3].startswith("memory/")) == len(range(0, PROCESS_MIN_FILES + 100, 50))

    assert (await index(workers, processes=2))["unchanged"] == PROCESS_MIN_FILES + 103, "a re-sync reads nothing"


async def test_a_killed_worker_leaves_the_rest_of_the_sync_to_threads(tmp_path):
    state = tmp_path / "state"
    corpus(state, PROCESS_MIN_FILES * 2)
    killed: list[int] = []

    def kill_the_workers(done: int, total: int) -> None:
        if done and not killed:  # the first batch is written: its worker is alive and busy with the next
            for child in multiprocessing.active_children():
                os.kill(child.pid, signal.SIGKILL)
                killed.append(child.pid)

    stats = await index(state, processes=1, progress=kill_the_workers)
    assert killed, "a worker process was running"
    assert stats["indexed"] == PROCESS_MIN_FILES * 2 + 3
    chunks, vectors = contents(state)
    assert len({row[0] for row in chunks}) == PROCESS_MIN_FILES * 2 + 3
    assert len(vectors) == len(chunks), "every chunk has its vector, those of the batches after the kill too"


def _half_a_result() -> None:
    """Runs in a pool worker: write the start of a result message (a header promising 1 MiB, then two
    bytes) into the pool's result pipe, then die — a worker killed while it wrote its result."""
    import struct
    import sys

    frame = sys._getframe()
    while frame is not None and "result_queue" not in frame.f_locals:  # concurrent.futures' _process_worker
        frame = frame.f_back
    assert frame is not None
    os.write(frame.f_locals["result_queue"]._writer.fileno(), struct.pack("!i", 1 << 20) + b"\x80\x04")
    os.kill(os.getpid(), signal.SIGKILL)


async def test_a_worker_killed_mid_result_breaks_the_pool_instead_of_hanging():
    """CPython's pool reads the half-written message forever (its manager thread blocks in recv, the
    batch never ends, the sync neither; seen as a 40-minute hang of the test above). The sync's watch on
    its workers breaks the pool itself, so the batch goes to a thread and the pool shuts down."""
    import asyncio
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    import pytest

    from gateway.memory.index.workers import watched

    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    fut = asyncio.get_running_loop().run_in_executor(pool, _half_a_result)
    with pytest.raises(BrokenProcessPool):
        await asyncio.wait_for(watched(pool, fut), 30)
    await asyncio.wait_for(asyncio.to_thread(pool.shutdown, True), 30)  # its manager thread is not stuck


def test_the_extractor_is_lent_by_the_setting():
    """`memory.sync.processes` 0 never lends a big sync an extractor; one set lends it whenever the sync
    gets no workers (a provider that cannot go to them, on any number of cores); -1 from 2 cores."""
    from gateway.memory.index.settings import lends_extractor

    for cores in range(1, 17):
        assert not lends_extractor(0, cores)
        assert lends_extractor(2, cores)
        assert lends_extractor(-1, cores) == (cores >= 2)


def _unportable(api) -> dict:
    """A provider that cannot go to worker processes (a remote one: the fake OpenAI-wire server)."""
    return {
        "memory.embeddings.provider": "openai",
        "memory.embeddings.baseUrl": api.base_url,
        "memory.embeddings.apiKey": "test",
        "memory.embeddings.dims": 64,
        "memory.embeddings.maxRetries": 0,
    }


async def test_an_extractor_process_writes_the_ledger_threads_write(tmp_path):
    """A large sync that gets no worker processes (here: its provider cannot go to them, whatever the
    cores) is prepared in threads and its ledger's statements are extracted in one process of their own
    (issue 46): the same index and the same statements as threads alone."""
    from tests.fake_openai import FakeOpenAI

    threads, extractor = tmp_path / "threads", tmp_path / "extractor"
    corpus(threads, PROCESS_MIN_FILES + 100)
    shutil.copytree(threads, extractor, symlinks=True)
    with FakeOpenAI() as api:
        await index(threads, processes=0, **_unportable(api))
        seen: set[int] = set()
        stats = await index(
            extractor,
            processes=2,
            progress=lambda done, total: seen.update(p.pid for p in multiprocessing.active_children()),
            **_unportable(api),
        )
    assert len(seen) == 1, "one extractor process"
    assert not multiprocessing.active_children(), "shut down with the sync"
    assert stats["indexed"] == PROCESS_MIN_FILES + 103
    assert contents(extractor)[0] == contents(threads)[0]
    ledger = statements(threads)
    assert statements(extractor) == ledger
    assert {r[0] for r in ledger} >= {"code:locker", "home"}, ledger[:3]


async def test_a_killed_extractor_leaves_the_statements_to_threads(tmp_path):
    from tests.fake_openai import FakeOpenAI

    threads, state = tmp_path / "threads", tmp_path / "state"
    corpus(threads, PROCESS_MIN_FILES * 2)
    shutil.copytree(threads, state, symlinks=True)
    killed: list[int] = []

    def kill_the_extractor(done: int, total: int) -> None:
        if done and not killed:
            for child in multiprocessing.active_children():
                os.kill(child.pid, signal.SIGKILL)
                killed.append(child.pid)

    with FakeOpenAI() as api:
        await index(threads, processes=0, **_unportable(api))
        stats = await index(state, processes=2, progress=kill_the_extractor, **_unportable(api))
    assert killed, "the extractor process was running"
    assert not multiprocessing.active_children(), "the lost extractor was shut down too"
    assert not [t for t in threading.enumerate() if type(t).__name__ == "_ExecutorManagerThread"]
    assert stats["indexed"] == PROCESS_MIN_FILES * 2 + 3
    assert statements(state) == statements(threads), "the batches after the kill have their statements too"


async def _sync_with_extractor(
    state: Path, progress=None, embed_elsewhere_min_files: int = PROCESS_MIN_FILES, provider=None
) -> dict:
    """A large sync as on 2-3 cores (`memory.sync.processes` -1 there): no worker processes, the extractor
    process lent, the local (portable) provider — whatever the cores of the machine running the test."""
    cfg = load_config({"stateDir": str(state), "memory.sync.onStart": False, "memory.sync.watch": False}, env={})
    mgr = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)
    await mgr.open()
    try:
        pipeline = mgr.index.pipeline
        pipeline.s = dataclasses.replace(pipeline.s, processes=0, extractor=True)
        pipeline.embed_elsewhere_min_files = embed_elsewhere_min_files  # the corpora here are below the default
        if provider is not None:
            pipeline.provider = provider
        return await mgr.sync(progress=progress)
    finally:
        await mgr.close()


class ModelFailsElsewhere(LocalEmbeddings):
    """The local model, except in a spawned process (the extractor makes its own copy from this class),
    where every call fails as a model that could not load there does: the local provider wraps the
    MemoryError or the missing file in an EmbeddingError, and the process stays alive."""

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        if multiprocessing.parent_process() is not None:
            raise EmbeddingError("local embedding failed: MemoryError", retryable=False)
        return super().embed_sync(texts)


def _embed_steps() -> int:
    """How many embedding steps this process's local model has taken (0: none loaded)."""
    from gateway.memory.embeddings import local

    return local._segments.clock if local._segments is not None else 0


async def test_the_extractor_process_embeds_what_threads_embed(tmp_path):
    """With a portable provider the extractor process embeds the sync's new chunks too (issue 46: on 2
    cores this process's GIL was the limit): this process embeds none of them, and the vectors are the
    ones threads make, byte for byte, beside the same chunks and statements."""
    threads, helper = tmp_path / "threads", tmp_path / "helper"
    corpus(threads, PROCESS_MIN_FILES + 100)
    shutil.copytree(threads, helper, symlinks=True)
    by_threads = await index(threads, processes=0)
    seen: set[int] = set()
    steps = _embed_steps()
    stats = await _sync_with_extractor(
        helper, progress=lambda done, total: seen.update(p.pid for p in multiprocessing.active_children())
    )
    assert len(seen) == 1, "one extractor process"
    assert not multiprocessing.active_children(), "shut down with the sync"
    assert _embed_steps() == steps, "this process embedded nothing"
    assert stats["chunksEmbedded"] == by_threads["chunksEmbedded"] > PROCESS_MIN_FILES
    chunks_t, vectors_t = contents(threads)
    chunks_h, vectors_h = contents(helper)
    assert chunks_h == chunks_t and all(row[-1] == 1 for row in chunks_h)
    assert vectors_h.keys() == vectors_t.keys()
    assert all(vectors_h[k].tobytes() == v.tobytes() for k, v in vectors_t.items())
    assert statements(helper) == statements(threads)


async def test_a_killed_extractor_leaves_the_embedding_to_threads(tmp_path):
    threads, state = tmp_path / "threads", tmp_path / "state"
    corpus(threads, PROCESS_MIN_FILES * 2)
    shutil.copytree(threads, state, symlinks=True)
    killed: list[int] = []

    def kill_the_extractor(done: int, total: int) -> None:
        if done and not killed:
            for child in multiprocessing.active_children():
                os.kill(child.pid, signal.SIGKILL)
                killed.append(child.pid)

    await index(threads, processes=0)
    stats = await _sync_with_extractor(state, progress=kill_the_extractor)
    assert killed, "the extractor process was running"
    assert not multiprocessing.active_children()
    assert stats["indexed"] == PROCESS_MIN_FILES * 2 + 3
    chunks_t, vectors_t = contents(threads)
    chunks_s, vectors_s = contents(state)
    assert chunks_s == chunks_t and all(row[-1] == 1 for row in chunks_s), "the batches after the kill embedded"
    assert all(vectors_s[k].tobytes() == v.tobytes() for k, v in vectors_t.items())
    assert statements(state) == statements(threads)


async def test_a_sync_below_the_threshold_embeds_in_this_process(tmp_path):
    """Below `EMBED_ELSEWHERE_MIN_FILES` the extractor only extracts: its own model's load would cost more
    than the GIL it frees; this process embeds, and the statements are the extractor's."""
    from gateway.memory.index.pipeline import EMBED_ELSEWHERE_MIN_FILES

    state = tmp_path / "state"
    corpus(state, PROCESS_MIN_FILES + 100)
    assert PROCESS_MIN_FILES + 103 < EMBED_ELSEWHERE_MIN_FILES
    steps = _embed_steps()
    stats = await _sync_with_extractor(state, embed_elsewhere_min_files=EMBED_ELSEWHERE_MIN_FILES)
    assert _embed_steps() > steps, "this process embedded"
    assert stats["chunksEmbedded"] > PROCESS_MIN_FILES
    assert {r[0] for r in statements(state)} >= {"code:locker", "home"}


def _indexed_as_threads_index(threads, state, stats) -> None:
    """`state`'s sync stored what threads alone stored in `threads`: every chunk with its vector, the same
    vectors, the same statements."""
    assert stats["indexed"] == PROCESS_MIN_FILES + 103
    chunks_t, vectors_t = contents(threads)
    chunks_s, vectors_s = contents(state)
    assert chunks_s == chunks_t and all(row[-1] == 1 for row in chunks_s), "every chunk has its vector"
    assert vectors_s.keys() == vectors_t.keys()
    assert all(vectors_s[k].tobytes() == v.tobytes() for k, v in vectors_t.items())
    assert statements(state) == statements(threads)


async def test_an_extractor_that_cannot_embed_leaves_the_embedding_to_threads(tmp_path):
    """Issue 46's review: an extractor alive but unable to embed ended the sync's embedding (its error
    was the sync's, and fill_missing was skipped): a large sync stored no vectors. Now this process embeds
    every batch, the vectors are the ones threads make, and the statements are still the extractor's."""
    threads, state = tmp_path / "threads", tmp_path / "state"
    corpus(threads, PROCESS_MIN_FILES + 100)
    shutil.copytree(threads, state, symlinks=True)
    await index(threads, processes=0)
    seen: set[int] = set()
    steps = _embed_steps()
    stats = await _sync_with_extractor(
        state,
        progress=lambda done, total: seen.update(p.pid for p in multiprocessing.active_children()),
        provider=ModelFailsElsewhere(),
    )
    assert len(seen) == 1, "the extractor process was lent"
    assert not multiprocessing.active_children(), "shut down with the sync"
    assert _embed_steps() > steps, "this process embedded"
    _indexed_as_threads_index(threads, state, stats)


async def test_a_worker_that_cannot_embed_leaves_the_embedding_to_threads(tmp_path):
    """The same gap in the worker path (`memory.sync.processes` set, as on 4+ cores): a worker whose
    copy of the provider failed made its error the sync's, and fill_missing was skipped. Now the batches
    are read and chunked by the workers and embedded by this process's threads, as threads would."""
    threads, state = tmp_path / "threads", tmp_path / "state"
    corpus(threads, PROCESS_MIN_FILES + 100)
    shutil.copytree(threads, state, symlinks=True)
    await index(threads, processes=0)
    cfg = load_config(
        {"stateDir": str(state), "memory.sync.onStart": False, "memory.sync.watch": False, "memory.sync.processes": 2},
        env={},
    )
    mgr = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)
    await mgr.open()
    seen: set[int] = set()
    steps = _embed_steps()
    try:
        mgr.index.pipeline.provider = ModelFailsElsewhere()
        stats = await mgr.sync(
            progress=lambda done, total: seen.update(p.pid for p in multiprocessing.active_children())
        )
    finally:
        await mgr.close()
    assert len(seen) == 2, "two worker processes prepared the batches"
    assert not multiprocessing.active_children(), "shut down with the sync"
    assert _embed_steps() > steps, "this process embedded"
    _indexed_as_threads_index(threads, state, stats)
