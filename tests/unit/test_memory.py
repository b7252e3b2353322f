"""Memory subsystem, driven through MemoryService on real SQLite files and real files under tmp_path.

The remote embedding provider is played by a real local HTTP server speaking the OpenAI wire format
(tests/fake_openai.py), which these tests can take down, slow or hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import stat
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from gateway.compose import memory_service
from gateway.config import load_config
from gateway.errors import Invalid, NotFound
from gateway.memory.hit import Hit
from gateway.memory.index.chunking import chunk_markdown, chunk_transcript
from gateway.memory.service import MemoryService
from gateway.storage.files.engine import FilesStorage
from gateway.memory.search.query import fts_query, query_terms
from gateway.calls import Call, Door
from gateway.dispatcher import Dispatcher
from gateway.sessions.transcript import append_sync, header, message_record
from gateway.memory.search.request import SearchRequest
from tests.fake_openai import FakeOpenAI


def make_cfg(tmp_path: Path, **over):
    base = {"stateDir": str(tmp_path / "state"), "memory.sync.onStart": False, "memory.sync.watch": False}
    base.update(over)
    return load_config(base, env={})


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def transcript(cfg, key: str, messages: list[tuple[str, str]]) -> Path:
    d = cfg.sessions_dir()
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{key}.jsonl"
    recs = [] if p.exists() else [header(key, "main")]
    n = len(p.read_text().splitlines()) if p.exists() else 0
    recs += [message_record(f"m{n + i}", role, text) for i, (role, text) in enumerate(messages)]
    append_sync(p, recs)
    return p


class ControlledAPI(FakeOpenAI):
    """The fake OpenAI server, plus: `down` answers every request 503; `hold` (a threading.Event that is
    clear) makes embedding requests wait until it is set."""

    def __init__(self, dims: int = 32):
        super().__init__(dims=dims)
        self.down = False
        self.hold: threading.Event | None = None

    def _next(self):
        if self.hold is not None:
            self.hold.wait(30)
        if self.down:
            return ("status", 503, {})
        return super()._next()


@pytest.fixture
def api():
    with ControlledAPI() as a:
        yield a
        if a.hold is not None:
            a.hold.set()


async def assert_fts_matches_chunks(m: MemoryService) -> None:
    """FTS5's own check that the full-text index holds exactly the chunks table's rows and terms."""
    await m.index.writer.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")


def paths(res: dict) -> list[str]:
    return [r["path"] for r in res["results"]]


# ---- chunking ---------------------------------------------------------------------------------------


def test_markdown_chunks_cover_every_line_and_break_at_headings():
    sections = []
    for s in range(6):
        sections.append(f"## Section {s}\n" + "\n".join(f"fact {s}.{i}: " + "word " * 12 for i in range(8)))
    text = "\n\n".join(sections) + "\n"
    chunks = chunk_markdown(text, tokens=200, overlap=40)
    lines = text.splitlines()
    assert len(chunks) > 3
    covered = set()
    for c in chunks:
        assert 1 <= c.start_line <= c.end_line <= len(lines)
        assert c.text == "\n".join(lines[c.start_line - 1 : c.end_line])
        assert len(c.text) <= 200 * 4
        covered.update(range(c.start_line, c.end_line + 1))
    assert covered == set(range(1, len(lines) + 1))
    # Most chunks start at a heading when one is within reach.
    assert sum(c.text.startswith("## ") for c in chunks) >= len(sections) - 1


def test_markdown_overlong_line_is_cut_but_keeps_its_line_number():
    text = "intro\n" + "x" * 5000 + "\nend\n"
    chunks = chunk_markdown(text, tokens=100, overlap=0)
    long = [c for c in chunks if c.start_line == 2 and c.end_line == 2]
    assert len(long) >= 10 and all(len(c.text) <= 400 for c in long)
    assert "".join(c.text.split("\n")[0] for c in chunks if c.start_line == 2) == "x" * 5000


def test_transcript_chunks_hold_whole_messages_with_jsonl_lines(tmp_path):
    cfg = make_cfg(tmp_path)
    msgs = [("user" if i % 2 == 0 else "assistant", f"message number {i} " + "blah " * (5 + i % 7)) for i in range(40)]
    msgs[17] = ("user", "L" * 5000)  # too long for one chunk: the only message that may be split
    p = transcript(cfg, "s1", msgs)
    with open(p, "ab") as fh:
        fh.write(b'{"type":"message","id":"torn","message":{"role":"user","content":"half')  # torn last line
    chunks = chunk_transcript(p, tokens=120, max_tokens=400)
    lines_seen: dict[int, int] = {}
    for c in chunks:
        assert c.spans and c.spans[0][0] == c.start_line and c.spans[-1][0] == c.end_line
        for line, _where, _a, _b in c.spans:
            lines_seen[line] = lines_seen.get(line, 0) + 1
    # Message i sits on JSONL line i + 2 (line 1 is the header); each appears once, except the long one.
    assert sorted(lines_seen) == list(range(2, 42))
    assert all(n == 1 for line, n in lines_seen.items() if line != 19)
    assert lines_seen[19] == 4  # 5000 chars in pieces of at most 1600
    for c in chunks:
        if c.start_line == 19 or c.end_line == 19:
            assert c.start_line == c.end_line == 19
    assert not any("half" in c.text for c in chunks)


# ---- query handling --------------------------------------------------------------------------------


def test_queries_never_become_fts_syntax():
    expr = fts_query(query_terms('NEAR(foo bar) "x" -y z* a:b OR AND NOT ) ('), "unicode61")
    # Every term is a quoted string (prefix stars only after a closing quote), joined by OR.
    for part in expr.split(" OR "):
        assert part.startswith('"') and (part.endswith('"') or part.endswith('"*'))
    assert query_terms("what did you do with the, of and to?") == []


async def test_syntax_heavy_long_and_stopword_queries(tmp_path, open_manager):
    cfg = make_cfg(tmp_path)
    write(cfg.workspace_dir / "MEMORY.md", "The deploy key lives in the vault.\nNEAR the office: parking lot B.\n")
    m = await open_manager(cfg)
    await m.sync()
    for q in [
        '"',
        '""',
        "*",
        "NEAR(",
        "-",
        ":",
        ")",
        "(",
        'deploy" OR "x',
        "key*",
        "-vault",
        "col:umn",
        "NEAR(deploy vault, 2)",
        "a AND OR NOT b",
        "^start",
        "{x y}",
        "'; DROP TABLE chunks; --",
        "\x00",
    ]:
        for mode in ("hybrid", "fts", "vector"):
            res = await m.search(SearchRequest(query=q, mode=mode))
            assert isinstance(res["results"], list)
    res = await m.search(SearchRequest(query='where is the "deploy key"? (NEAR vault*)', mode="fts"))
    assert paths(res) == ["MEMORY.md"]
    assert "deploy key" in res["results"][0]["snippet"]

    res = await m.search(SearchRequest(query="what was it that they were doing there?"))
    assert res["results"] == [] and "degraded" not in res

    long_q = ("deploy vault parking " * 200)[:2000]
    res = await m.search(SearchRequest(query=long_q))
    assert paths(res) == ["MEMORY.md"]
    assert (await m.search(SearchRequest(query="   ")))["results"] == []  # no words: nothing to find, no error
    import gateway.methods.memory  # noqa: F401 - registers the methods; they validate, not the manager

    call = _calls(m)
    with pytest.raises(Invalid) as ei:
        await call("memory.search", {"query": "x" * 2001})
    assert ei.value.field == "params.query"


async def test_cjk_with_trigram_tokenizer(tmp_path, open_manager):
    cfg = make_cfg(tmp_path, **{"memory.search.ftsTokenizer": "trigram"})
    write(cfg.workspace_dir / "memory" / "jp.md", "# 旅行\n\n東京タワーに行きました。夜景がきれいでした。\n")
    write(cfg.workspace_dir / "memory" / "zh.md", "我喜欢在北京吃烤鸭。\n")
    write(cfg.workspace_dir / "memory" / "en.md", "Notes about the garden and tomatoes.\n")
    m = await open_manager(cfg)
    await m.sync()
    assert (await m.status())["fts"]["tokenizer"] == "trigram"
    res = await m.search(SearchRequest(query="東京タワーの夜景", mode="fts"))
    assert paths(res)[0] == "memory/jp.md"
    res = await m.search(SearchRequest(query="北京烤鸭", mode="fts"))
    assert paths(res)[0] == "memory/zh.md"
    res = await m.search(SearchRequest(query="tomatoes", mode="fts"))
    assert paths(res) == ["memory/en.md"]


# ---- sync ------------------------------------------------------------------------------------------


async def test_incremental_sync_follows_edits_adds_and_deletes(tmp_path, open_manager):
    cfg = make_cfg(tmp_path)
    ws = cfg.workspace_dir
    write(ws / "MEMORY.md", "# About me\nI keep bees on the roof.\n")
    write(ws / "memory" / "trips.md", "Trip to Porto in May.\n")
    m = await open_manager(cfg)
    first = await m.sync()
    assert first["indexed"] == 2 and first["chunksEmbedded"] == 2 and first["removed"] == 0
    assert paths(await m.search(SearchRequest(query="bees roof", mode="fts"))) == ["MEMORY.md"]

    again = await m.sync()
    assert again == {**again, "indexed": 0, "removed": 0, "unchanged": 2, "chunksEmbedded": 0}

    write(ws / "memory" / "trips.md", "Trip to Kyoto in October.\n")
    write(ws / "memory" / "sub" / "new.md", "The new espresso machine needs descaling.\n")
    st = await m.sync()
    assert st["indexed"] == 2 and st["unchanged"] == 1 and st["chunksEmbedded"] == 2
    assert paths(await m.search(SearchRequest(query="Porto", mode="fts"))) == []
    assert paths(await m.search(SearchRequest(query="Kyoto", mode="fts"))) == ["memory/trips.md"]
    assert paths(await m.search(SearchRequest(query="espresso descaling", mode="fts"))) == ["memory/sub/new.md"]

    # Touched but identical: hashed, not re-chunked, not re-embedded.
    os.utime(ws / "MEMORY.md", None)
    st = await m.sync()
    assert st["indexed"] == 0 and st["chunksEmbedded"] == 0

    (ws / "memory" / "trips.md").unlink()
    st = await m.sync()
    assert st["removed"] == 1
    assert paths(await m.search(SearchRequest(query="Kyoto", mode="fts"))) == []
    await assert_fts_matches_chunks(m)
    status = await m.status()
    assert status["files"] == 2 and status["sources"]["memory"] == {"files": 2, "chunks": 2}
    assert status["dirty"] is False and status["lastSyncAt"].endswith("Z")
    assert m.health() == {"files": 2, "chunks": 2, "dirty": False, "watcher": "off"}


async def test_a_sync_batch_becomes_one_full_text_segment(tmp_path, open_manager):
    """Several MiB of new text in one write transaction: FTS5 writes it as one segment (not one per MiB of
    pending terms, each merged again later), and the index stays exact."""
    cfg = make_cfg(tmp_path, **{"memory.embeddings.provider": "none"})
    rng = random.Random(3)
    vocab = [f"w{i}x" for i in range(20_000)]
    for i in range(200):
        write(
            cfg.workspace_dir / "memory" / f"n{i:03d}.md",
            "\n".join(" ".join(rng.choice(vocab) for _ in range(15)) for _ in range(100)) + "\n",
        )
    m = await open_manager(cfg)
    await m.sync()
    chunks = await m.index.writer.scalar("SELECT count(*) FROM chunks")
    text = await m.index.writer.scalar("SELECT sum(length(text)) FROM chunks")
    assert chunks > 600 and text > 2_000_000
    assert await m.index.writer.scalar("SELECT count(DISTINCT segid) FROM chunks_fts_idx") == 1
    await assert_fts_matches_chunks(m)
    assert paths(await m.search(SearchRequest(query="w123x", mode="fts")))


async def test_sessions_are_indexed_scheduled_and_forgotten(tmp_path, open_manager):
    cfg = make_cfg(tmp_path, **{"memory.sync.sessionDebounceMs": 60_000})
    transcript(cfg, "alpha", [("user", "My sister Ana moved to Berlin."), ("assistant", "Good to know!")])
    transcript(cfg, "beta", [("user", "The boiler makes a clicking noise.")])
    m = await open_manager(cfg)
    await m.sync()
    res = await m.search(SearchRequest(query="Ana Berlin"))
    top = res["results"][0]
    assert top["path"] == "sessions/alpha.jsonl" and top["sessionKey"] == "alpha"
    assert (top["startLine"], top["endLine"]) == (2, 3)

    # After a chat.final the session is dirty; a search before the debounce fires syncs it first.
    transcript(cfg, "alpha", [("user", "Ana also adopted a greyhound.")])
    m.schedule_session_sync("alpha")
    assert m.health()["dirty"] is True
    res = await m.search(SearchRequest(query="greyhound", mode="fts"))
    assert paths(res) == ["sessions/alpha.jsonl"] and res["results"][0]["endLine"] == 4
    assert m.health()["dirty"] is False

    # Filters.
    res = await m.search(
        SearchRequest(query="boiler clicking Berlin", sources=("sessions",), session_key="beta", mode="fts")
    )
    assert paths(res) == ["sessions/beta.jsonl"]
    res = await m.search(SearchRequest(query="boiler", sources=("memory",)))
    assert res["results"] == []

    await assert_fts_matches_chunks(m)
    await m.forget_session("alpha")
    assert paths(await m.search(SearchRequest(query="greyhound Berlin", mode="fts"))) == []
    await assert_fts_matches_chunks(m)
    assert (await m.status())["sources"]["sessions"]["files"] == 1


async def test_deleted_transcript_is_removed_on_sync(tmp_path, open_manager):
    cfg = make_cfg(tmp_path)
    p = transcript(cfg, "gone", [("user", "temporary note about kayaks")])
    m = await open_manager(cfg)
    await m.sync()
    p.unlink()
    st = await m.sync()
    assert st["removed"] == 1
    assert (await m.search(SearchRequest(query="kayaks", mode="fts")))["results"] == []


async def test_concurrent_sync_requests_coalesce_and_keep_force(tmp_path, open_manager):
    cfg = make_cfg(tmp_path)
    for i in range(30):
        write(cfg.workspace_dir / "memory" / f"n{i}.md", f"note {i} about topic{i}\n")
    m = await open_manager(cfg)
    results = await asyncio.gather(*(m.sync() for _ in range(5)), m.sync(force=True))
    assert sum(r["indexed"] for r in results) >= 30
    # The forced request was not dropped: its run re-read every file.
    assert results[-1]["indexed"] + results[-1]["unchanged"] == 30
    assert results[-1]["indexed"] == 30 or results[0]["indexed"] == 30
    forced = await m.sync(force=True)
    assert forced["indexed"] == 30 and forced["chunksEmbedded"] == 0 and forced["cacheHits"] == 0


async def test_restart_reembeds_nothing_and_the_local_model_is_not_cached(tmp_path, open_manager):
    cfg = make_cfg(tmp_path)
    for i in range(5):
        write(cfg.workspace_dir / "memory" / f"d{i}.md", f"# Day {i}\nWent hiking on trail number {i}.\n")
    m = await open_manager(cfg)
    st = await m.sync()
    assert st["chunksEmbedded"] == 5
    await m.close()

    m2 = await open_manager(cfg)
    st = await m2.sync()
    assert st["chunksEmbedded"] == 0 and st["indexed"] == 0 and st["unchanged"] == 5
    st = await m2.sync(force=True)  # re-chunks everything: identical chunks are kept, nothing embedded
    assert st["chunksEmbedded"] == 0 and st["indexed"] == 5
    # The local model is not cached (it embeds faster than the cache would pay back) ...
    assert (await m2.status())["cache"]["entries"] == 0
    # ... and its entries in an index from before are dropped; another provider's are kept.
    for provider in ("local", "openai"):
        await m2.index.writer.execute(
            "INSERT INTO embedding_cache(provider, model, hash, dims, embedding) "
            "VALUES (?, 'wordllama-l2-supercat-256', 'h', 1, x'00000000')",
            (provider,),
        )
    await m2.sync()
    assert await m2.index.writer.fetchall("SELECT provider FROM embedding_cache") == [("openai",)]


async def test_a_rebuilt_index_takes_remote_vectors_from_the_cache(tmp_path, api, open_manager):
    cfg = openai_cfg(tmp_path, api)
    for i in range(5):
        write(cfg.workspace_dir / "memory" / f"d{i}.md", f"# Day {i}\nWent hiking on trail number {i}.\n")
    m = await open_manager(cfg)
    st = await m.sync()
    assert st["chunksEmbedded"] == 5 and (await m.status())["cache"]["entries"] == 5
    await m.close()
    calls = api.count("/v1/embeddings")
    # New chunking settings rebuild the index over the same state dir: every vector comes from the cache.
    m2 = await open_manager(openai_cfg(tmp_path, api, **{"memory.chunking.tokens": 300}))
    st = await m2.sync()
    assert st["chunksEmbedded"] == 0 and st["cacheHits"] == 5
    assert api.count("/v1/embeddings") == calls
    assert (await m2.search(SearchRequest(query="hiking trail")))["mode"] == "hybrid"


async def test_database_file_modes(tmp_path, open_manager):
    cfg = make_cfg(tmp_path)
    m = await open_manager(cfg)
    await m.sync()
    db = cfg.memory_db()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700


async def test_numpy_vector_backend(tmp_path, open_manager):
    cfg = make_cfg(tmp_path, **{"memory.search.vectorBackend": "numpy"})
    write(cfg.workspace_dir / "memory" / "pets.md", "Our dog Rex loves chasing squirrels in the park.\n")
    write(cfg.workspace_dir / "memory" / "car.md", "The car needs new winter tyres before December.\n")
    m = await open_manager(cfg)
    await m.sync()
    res = await m.search(SearchRequest(query="puppy playing outdoors", mode="vector"))
    assert res["mode"] == "vector" and paths(res)[0] == "memory/pets.md"
    assert all(0.0 <= r["score"] <= 1.0 for r in res["results"])
    st = await m.status()  # a small index's matrix stays float32 (int8 from 262,144 vectors)
    assert st["vector"] == {"backend": "numpy", "available": True, "missing": 0, "matrix": "float32", "ann": None}


async def test_provider_none_is_full_text_only(tmp_path, open_manager):
    cfg = make_cfg(tmp_path, **{"memory.embeddings.provider": "none"})
    write(cfg.workspace_dir / "MEMORY.md", "Allergic to penicillin.\n")
    m = await open_manager(cfg)
    await m.sync()
    res = await m.search(SearchRequest(query="penicillin allergy"))
    assert paths(res) == ["MEMORY.md"] and res["mode"] == "fts" and "disabled" in res["degraded"]
    st = await m.status()
    assert st["vector"]["backend"] == "none" and st["embeddings"]["provider"] == "none"


async def test_watcher_picks_up_new_memory_files(tmp_path, open_manager):
    cfg = make_cfg(tmp_path, **{"memory.sync.watch": True, "memory.sync.watchDebounceMs": 50})
    cfg.workspace_dir.mkdir(parents=True)
    m = await open_manager(cfg)
    await m.sync()
    write(cfg.workspace_dir / "memory" / "w.md", "Watched file mentions zeppelins.\n")

    async def until_found() -> None:
        while True:
            m.cfg.sync.on_search = False  # only the watcher may bring it in
            if paths(await m.search(SearchRequest(query="zeppelins", mode="fts"))):
                return
            await asyncio.sleep(0.05)

    await asyncio.wait_for(until_found(), timeout=20)


# ---- memory.get ------------------------------------------------------------------------------------


async def test_get_reads_only_indexable_paths(tmp_path, open_manager):
    cfg = make_cfg(tmp_path)
    ws = cfg.workspace_dir
    write(ws / "MEMORY.md", "\n".join(f"line {i}" for i in range(1, 301)) + "\n")
    write(ws / "memory" / "ok.md", "fine\n")
    write(ws / "secret.txt", "not memory\n")
    write(tmp_path / "outside.md", "outside the workspace\n")
    (ws / "memory" / "escape.md").symlink_to(tmp_path / "outside.md")
    (ws / "memory" / "inside.md").symlink_to(ws / "memory" / "ok.md")
    (ws / "memory" / "txt.md").symlink_to(ws / "secret.txt")
    transcript(cfg, "k1", [("user", "hello")])
    m = await open_manager(cfg)

    r = await m.get("MEMORY.md")
    assert r["from"] == 1 and r["lines"] == 120 and r["truncated"] is True and r["nextFrom"] == 121
    assert r["text"].splitlines()[0] == "line 1" and r["text"].splitlines()[-1] == "line 120"
    r = await m.get("MEMORY.md", from_=290, lines=50)
    assert r["text"].splitlines() == [f"line {i}" for i in range(290, 301)] and r["truncated"] is False
    assert "nextFrom" not in r
    assert (await m.get("memory/inside.md"))["text"] == "fine"
    r = await m.get("sessions/k1.jsonl", from_=2, lines=1)
    assert '"hello"' in r["text"]

    bad = {
        "../outside.md": "'..'",
        "memory/../../outside.md": "'..'",
        str(tmp_path / "outside.md"): "absolute",
        "/etc/passwd": "absolute",
        "secret.txt": ".md",
        "memory/escape.md": "outside the workspace",
        "memory/txt.md": "not a .md",
        "notes/x.md": "not a memory path",
        "sessions/../MEMORY.md": "'..'",
        "sessions/bad key.jsonl": "session key",
    }
    for path, why in bad.items():
        with pytest.raises(Invalid) as ei:
            await m.get(path)
        assert why in ei.value.message, (path, ei.value.message)
    for path in ("memory/nope.md", "memory.md", "sessions/nosuch.jsonl"):
        with pytest.raises(NotFound):
            await m.get(path)


# ---- model change, provider failures ---------------------------------------------------------------


def openai_cfg(tmp_path, api, **over):
    base = {
        "memory.embeddings.provider": "openai",
        "memory.embeddings.baseUrl": api.base_url,
        "memory.embeddings.apiKey": "test",
        "memory.embeddings.model": "fake-a",
        "memory.embeddings.maxRetries": 1,
        "memory.embeddings.timeout": 10,
    }
    base.update(over)
    return make_cfg(tmp_path, **base)


async def test_provider_down_indexes_full_text_then_fills_vectors(tmp_path, api, open_manager):
    cfg = openai_cfg(tmp_path, api)
    write(cfg.workspace_dir / "MEMORY.md", "The wifi password is on the fridge.\n")
    transcript(cfg, "s", [("user", "Remind me to call the plumber on Monday.")])
    api.down = True
    m = await open_manager(cfg)
    st = await m.sync()
    assert st["indexed"] == 2 and st["chunksEmbedded"] == 0
    status = await m.status()
    assert status["vector"]["missing"] == 2 and "503" in status["embeddings"]["error"]
    res = await m.search(SearchRequest(query="plumber Monday"))
    assert paths(res) == ["sessions/s.jsonl"]
    assert res["mode"] == "fts" and "unavailable" in res["degraded"]

    api.down = False
    st = await m.sync()  # every sync retries the chunks that lack vectors
    assert st["chunksEmbedded"] == 2 and st["indexed"] == 0
    status = await m.status()
    assert status["vector"] == {"backend": "sqlite-vec", "available": True, "missing": 0, "matrix": None, "ann": None}
    assert "error" not in status["embeddings"]
    res = await m.search(SearchRequest(query="plumber Monday"))
    assert res["mode"] == "hybrid" and "degraded" not in res and paths(res)[0] == "sessions/s.jsonl"
    assert any("dimensions" not in r["body"] for r in api.requests if r["path"].endswith("/embeddings"))


async def test_retry_after_is_honoured(tmp_path, api, open_manager):
    cfg = openai_cfg(tmp_path, api)
    write(cfg.workspace_dir / "MEMORY.md", "Rate limited text about llamas.\n")
    api.script(("status", 429, {"Retry-After": "0"}))
    m = await open_manager(cfg)
    st = await m.sync()
    assert st["chunksEmbedded"] == 1
    assert api.count("/v1/embeddings") == 2


async def test_model_change_rebuilds_while_search_keeps_answering(tmp_path, api, open_manager):
    cfg = openai_cfg(tmp_path, api)
    for i in range(8):
        write(cfg.workspace_dir / "memory" / f"f{i}.md", f"Fact {i}: the lighthouse keeper number {i} likes tea.\n")
    m = await open_manager(cfg)
    await m.sync()
    assert (await m.status())["embeddings"]["dims"] == 32
    await m.close()

    cfg_b = openai_cfg(tmp_path, api, **{"memory.embeddings.model": "fake-b", "memory.embeddings.dims": 48})
    api.hold = threading.Event()  # embedding requests wait until released
    m2 = await open_manager(cfg_b)
    assert m2.health()["dirty"] is True
    rebuild = asyncio.create_task(m2.sync())
    await asyncio.sleep(0)
    while not any(r["body"].get("model") == "fake-b" for r in api.requests if r["path"].endswith("/embeddings")):
        await asyncio.sleep(0.01)  # the rebuild is now waiting on the embedding server
    res = await m2.search(SearchRequest(query="lighthouse keeper tea"))
    assert len(res["results"]) == 6 and res["mode"] == "fts" and "rebuil" in res["degraded"]
    assert (await m2.status())["rebuilding"] is True
    api.hold.set()
    st = await rebuild
    assert st["indexed"] == 8 and st["chunksEmbedded"] == 8
    status = await m2.status()
    assert status["embeddings"] == {"provider": "openai", "model": "fake-b", "dims": 48}
    assert status["files"] == 8 and "rebuilding" not in status and status["vector"]["available"]
    assert status["cache"]["entries"] == 16  # the old model's vectors were kept
    res = await m2.search(SearchRequest(query="lighthouse keeper tea"))
    assert res["mode"] == "hybrid" and "degraded" not in res
    assert not Path(str(cfg_b.memory_db()) + ".rebuild").exists()


# ---- the wire methods and the CLI ------------------------------------------------------------------


def _calls(manager):
    """The memory.* methods through the one path of a call, on services that hold only this manager."""
    services = SimpleNamespace(memory=manager, request_scope=contextlib.nullcontext)
    calls = Dispatcher(services)  # type: ignore[arg-type]
    return lambda method, params: calls.perform(Call(Door.CLI, method, params))


async def test_methods_validate_and_call_the_manager(tmp_path, open_manager):
    import gateway.methods.memory  # noqa: F401 - registers the methods

    cfg = make_cfg(tmp_path)
    write(cfg.workspace_dir / "MEMORY.md", "Birthday: 4 March.\n")
    m = await open_manager(cfg)
    call = _calls(m)
    st = await call("memory.sync", {})
    assert set(st) == {"indexed", "removed", "unchanged", "chunksEmbedded", "cacheHits", "durationMs"}
    res = await call("memory.search", {"query": "birthday", "k": 3})
    assert set(res) == {"results", "mode", "embeddings"}
    assert set(res["results"][0]) == {"path", "source", "startLine", "endLine", "score", "snippet", "date"}
    got = await call("memory.get", {"path": "MEMORY.md", "from": 1, "lines": 5})
    assert got["text"] == "Birthday: 4 March."
    status = await call("memory.status", None)
    assert {"files", "chunks", "sources", "dirty", "lastSyncAt", "embeddings", "vector", "fts", "cache"} <= set(status)
    for params, field in (
        ({"query": "x", "k": 0}, "params.k"),
        ({"query": ""}, "params.query"),
        ({"query": "x", "mode": "magic"}, "params.mode"),
        ({"query": "x", "sources": ["web"]}, "params.sources[0]"),
        ({"path": "x.md", "lines": 0}, "params.lines"),
    ):
        method = "memory.get" if "path" in params else "memory.search"
        with pytest.raises(Invalid) as ei:
            await call(method, params)
        assert ei.value.field == field


def test_cli_commands_print_method_results(tmp_path, capsys):
    import orjson

    from tests.helpers import memory_cli

    cfg = load_config({"stateDir": str(tmp_path / "state")}, env={})
    write(cfg.workspace_dir / "MEMORY.md", "The spare key is under the blue flowerpot.\n")
    run = memory_cli(cfg, capsys)

    code, out = run("memory", "sync", "--json")
    assert code == 0 and orjson.loads(out)["indexed"] == 1
    code, out = run("memory", "search", "spare key flowerpot", "--k", "2", "--json")
    res = orjson.loads(out)
    assert code == 0 and res["results"][0]["path"] == "MEMORY.md" and res["mode"] == "hybrid"
    code, out = run("memory", "status", "--json")
    assert code == 0 and orjson.loads(out)["files"] == 1
    code, out = run("memory", "search", "flowerpot")
    assert code == 0 and "MEMORY.md:1\n" in out  # one line: "1", not "1-1"
    code, _ = run("memory", "search", "x" * 2001)
    assert code == 2


async def test_common_words_are_skipped_on_big_indexes(tmp_path, open_manager, monkeypatch):
    from gateway.memory.search import pruning
    from gateway.storage.fts5 import Fts5Search

    cfg = make_cfg(tmp_path)
    for i in range(40):
        write(cfg.workspace_dir / "memory" / f"c{i}.md", f"Weekly meeting notes, week {i}.\n")
    write(cfg.workspace_dir / "memory" / "rare.md", "Weekly meeting about the zeppelin budget.\n")
    m = await open_manager(cfg)
    await m.sync()
    s = m.index.life.searcher.text  # the FTS5 full text
    total = m.index.life.searcher.total_chunks
    terms = query_terms("weekly meeting zeppelin")
    assert await s.prune_common(terms, total) == terms  # a small index searches every word
    monkeypatch.setattr(pruning, "PRUNE_MIN_CHUNKS", 10)  # as if this index were big
    assert await s.prune_common(terms, total) == ["zeppelin"]  # rarest first, within the postings budget
    res = await m.search(SearchRequest(query="weekly meeting zeppelin", mode="fts"))
    assert paths(res)[0] == "memory/rare.md"
    assert await s.prune_common(["weekly", "meeting"], total) in (["weekly"], ["meeting"])  # the rarest always stays
    # A word in no chunk finds nothing: it never stands in for the rarest word that does occur.
    assert await s.prune_common(["weekly", "meeting", "xylophonic"], total) in (
        ["weekly", "xylophonic"],
        ["meeting", "xylophonic"],
    )
    # A new search on the same connection (as after the first sync that stores vectors) may answer
    # beside the old one: they share the connection's scratch table, and must not read each other's words.
    s2 = Fts5Search(s.db, s.tokenizer, s.context_weight)
    other = query_terms("budget notes week")
    want = [await s.prune_common(terms, total), await s2.prune_common(other, total)]
    assert want[0] == ["zeppelin"] and want[1] != want[0]
    for _ in range(5):
        assert await asyncio.gather(s.prune_common(terms, total), s2.prune_common(other, total)) == want


async def test_a_searchs_rows_bring_their_vectors_and_agree_with_a_fresh_read(tmp_path, open_manager):
    """The rows a search shows come with their stored vectors in the same trip to the SQLite thread; the
    vectors asked for next are those, and after another search's rows the reader reads them again."""
    from gateway.storage.files.memory.vectors import read_vectors

    cfg = make_cfg(tmp_path)
    for i in range(6):
        write(cfg.workspace_dir / "memory" / f"n{i}.md", f"Note {i} about the {['boat', 'garden', 'piano'][i % 3]}.\n")
    m = await open_manager(cfg)
    await m.sync()
    reader = m.index.life.searcher.rows
    ids = [int(r[0]) for r in await reader.db.fetchall("SELECT id FROM chunks ORDER BY id")]
    stored = await read_vectors(reader.db, ids)
    assert len(stored) == len(ids) >= 6

    def same(got: dict, want_ids: list[int]) -> bool:
        return sorted(got) == sorted(want_ids) and all(got[i].tobytes() == stored[i] for i in want_ids)

    first, rest = ids[:3], ids[3:]
    assert sorted(int(r[0]) for r in await reader.chunk_rows(first)) == first
    assert same(await reader.vectors_of(first), first)
    assert same(await reader.vectors_of(first[:2]), first[:2])  # a subset of the rows: the same vectors
    await reader.chunk_rows(rest)  # another search's rows since
    assert same(await reader.vectors_of(first), first)  # read again, not taken from the other rows
    assert same(await reader.vectors_of(ids), ids)
    assert await reader.vectors_of([max(ids) + 1000]) == {}  # no such chunk: no vector
    res = await m.search(SearchRequest(query="boat garden", mode="hybrid"))
    assert res["results"] and all(r["path"].startswith("memory/") for r in res["results"])


async def test_the_generation_a_search_is_given_is_the_files_after_every_write(tmp_path, open_manager):
    """Searches take the generation read after the last write instead of reading it each time; a write
    under way (its bump not committed when the counts were read, as by a status during a sync) must not
    leave them an old one."""
    from gateway.storage.files.memory.migrations import get_meta

    cfg = make_cfg(tmp_path)
    write(cfg.workspace_dir / "memory" / "a.md", "The boat is blue.\n")
    m = await open_manager(cfg)
    await m.sync()
    ix = m.index

    async def given() -> str:
        async with ix.reading() as gen:
            return gen

    async def in_file() -> str:
        return await get_meta(ix.reader, "generation", "0") or "0"

    first = await given()
    assert first == await in_file()
    write(cfg.workspace_dir / "memory" / "b.md", "The garden is green.\n")
    await m.sync()
    second = await given()
    assert second == await in_file() != first
    # A bump in a write's open transaction, the counts read meanwhile, then the commit.
    async with ix.life.write_lock:
        async with ix.writer.transaction():
            await ix.store._bump()
            await ix.refresh_counts()
            assert await given() == second  # not committed: the file's is still the old one
    assert await given() == await in_file() != second
    assert paths(await m.search(SearchRequest(query="garden", mode="fts")))[0] == "memory/b.md"


async def test_insert_rows_keeps_every_value_exact(tmp_path):
    from gateway.storage.files.memory.db import Database, pick_driver

    db = await Database(tmp_path / "t.db", pick_driver(), use_vec=False).open()
    try:
        await db.execute("CREATE TABLE t (a INTEGER, b TEXT, c TEXT, v BLOB)")
        vecs = np.arange(5000 * 4, dtype=np.float32).reshape(5000, 4)  # > one statement's rows
        rows = [
            (i * 1_700_000_000_000_000_000 // 5000, f"text {i}", None if i % 2 else '{"x": [1]}') for i in range(5000)
        ]
        await db.insert_rows("INSERT INTO t(a, b, c, v)", rows, vecs)
        got = await db.fetchall("SELECT a, b, c, v FROM t ORDER BY rowid")
        assert [g[:3] for g in got] == rows
        assert all(np.array_equal(np.frombuffer(g[3], dtype=np.float32), vecs[i]) for i, g in enumerate(got))
        # A NUL inside a string survives (older SQLite's json_extract would cut it).
        await db.insert_rows("INSERT INTO t(a, b, c)", [(1, "before\x00after", "x"), (2, "plain", None)])
        assert await db.fetchall("SELECT b FROM t WHERE a IN (1, 2) AND c IS NOT NULL OR b = 'plain'") == [
            ("before\x00after",),
            ("plain",),
        ]
        # Also with vectors, in a later statement of the same call: each row keeps its own vector.
        await db.execute("DELETE FROM t")
        rows = [(i, "nul\x00here" if i == 4098 else f"text {i}", None) for i in range(4100)]
        await db.insert_rows("INSERT INTO t(a, b, c, v)", rows, vecs[:4100])
        got = await db.fetchall("SELECT a, b, c, v FROM t ORDER BY a")
        assert [g[:3] for g in got] == rows
        assert all(np.array_equal(np.frombuffer(g[3], dtype=np.float32), vecs[i]) for i, g in enumerate(got))
        await db.insert_rows("INSERT INTO t(a)", [])
    finally:
        await db.close()


def test_search_options_and_index_settings_have_no_defaults_of_their_own():
    """The config is the one source of truth: SearchOptions/IndexSettings are built from it, field by
    field, and carry no defaults that could disagree with it."""
    import dataclasses

    from gateway.config import load_config
    from gateway.memory.index.settings import IndexSettings
    from gateway.memory.search.searcher import SearchOptions

    for cls in (SearchOptions, IndexSettings):
        assert all(
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            for f in dataclasses.fields(cls)
        ), cls
    cfg = load_config(
        {
            "memory.search.fusion": "weighted",
            "memory.search.vectorWeight": "0.42",
            "memory.search.coverageWeight": "0.11",
            "memory.chunking.sessionTokens": "99",
        },
        env={},
    )
    opts = SearchOptions.from_config(cfg.memory.search)
    for f in dataclasses.fields(SearchOptions):
        want = getattr(cfg.memory.search, "fts_tokenizer" if f.name == "tokenizer" else f.name)
        assert getattr(opts, f.name) == want, f.name
    assert (opts.fusion, opts.vector_weight, opts.coverage_weight) == ("weighted", 0.42, 0.11)
    st = IndexSettings.from_config(cfg.memory, Path("/w"), Path("/s"), "numpy")
    assert st.session_tokens == 99 and st.tokens == cfg.memory.chunking.tokens
    assert st.session_context == cfg.memory.chunking.session_context


async def test_rank_fusion_is_the_default_and_the_blend_an_option(tmp_path, open_manager):
    assert load_config({}, env={}).memory.search.fusion == "rrf"
    for fusion in ("rrf", "weighted"):
        cfg = make_cfg(tmp_path / fusion, **{"memory.search.fusion": fusion})
        write(cfg.workspace_dir / "memory" / "pets.md", "Our dog Rex loves chasing squirrels in the park.\n")
        write(cfg.workspace_dir / "memory" / "car.md", "The car needs new winter tyres before December.\n")
        write(cfg.workspace_dir / "memory" / "garden.md", "Rex dug up the tulips in the garden again.\n")
        m = await open_manager(cfg)
        await m.sync()
        res = await m.search(SearchRequest(query="where does the dog Rex chase squirrels"))
        assert res["mode"] == "hybrid" and paths(res)[0] == "memory/pets.md", (fusion, res)
        assert "memory/car.md" not in paths(res), "shares no word and is not close: not a hit"
        assert all(0.0 < r["score"] <= 1.0 for r in res["results"])
        assert res["results"][0]["score"] > res["results"][-1]["score"] or len(res["results"]) == 1


async def test_mmr_reads_each_results_stored_vector(tmp_path, open_manager):
    """The vectors MMR compares are the stored ones, found by point lookups (vec0 would answer
    `chunk_id IN (…)` with a scan of every vector)."""
    cfg = make_cfg(tmp_path, **{"memory.search.mmr": True})
    for i, text in enumerate(
        [
            "The cello lesson is on Tuesday.",
            "Lena's cello teacher is Mr Okafor.",
            "The cello case is in the hall.",
            "Tuesday is also bin day.",
        ]
    ):
        write(cfg.workspace_dir / "memory" / f"n{i}.md", f"# Note {i}\n\n{text}\n")
    mem = await open_manager(cfg)
    await mem.sync()
    res = await mem.search(SearchRequest(query="cello Tuesday", k=3))
    found = [
        Hit(r["path"], r["source"], r["startLine"], r["endLine"], r["score"], r["snippet"]) for r in res["results"]
    ]
    vecs = await mem.index.stored_vectors(found)
    assert vecs is not None and sorted(vecs) == [0, 1, 2]
    for i, v in vecs.items():  # each result's own chunk's vector, as stored
        r = res["results"][i]
        stored = await mem.index.reader.fetchall(
            "SELECT v.embedding FROM chunks c JOIN chunks_vec v ON v.chunk_id = c.id "
            "WHERE c.path = ? AND c.start_line = ? AND c.end_line = ?",
            (r["path"], r["startLine"], r["endLine"]),
        )
        assert len(stored) == 1 and v.tobytes() == stored[0][0]
    assert len({v.tobytes() for v in vecs.values()}) == 3, "each result its own vector"


async def test_two_indexers_racing_on_a_new_file_store_its_chunks_once(tmp_path, open_manager):
    """The gateway (its watcher) and `jarvis memory set` (its own sync) both index a new keyed memory:
    each began its sync before the other wrote, so neither knew the file. Issue 23: two identical hits."""
    cfg = make_cfg(tmp_path, **{"memory.embeddings.provider": "none"})
    gateway, cli = await open_manager(cfg), await open_manager(cfg)
    write(cfg.workspace_dir / "memory" / "keyed" / "general" / "first.md", "# first\n\nthe very first note\n")
    await asyncio.gather(gateway.sync(), cli.sync())
    rows = await gateway.index.reader.fetchall(
        "SELECT path, start_line, end_line, count(*) FROM chunks GROUP BY 1, 2, 3"
    )
    assert rows == [("memory/keyed/general/first.md", 1, 3, 1)]
    res = await gateway.search(SearchRequest(query="very first note"))
    assert len(res["results"]) == 1


async def test_chunk_identity_migration_drops_duplicates(tmp_path):
    """An index that a race left with duplicated chunks: migration 010 keeps one of each (with its
    full-text and vector rows) and makes the identity unique, so no race can duplicate it again."""
    from gateway.storage.files.memory.db import Database, index_driver
    from gateway.storage.files.memory.migrations import (
        MIGRATIONS,
        SchemaParams,
        ensure_vector_table,
        get_meta,
        migrate,
    )

    db = await Database(tmp_path / "m.sqlite", index_driver("numpy"), use_vec=False).open()
    try:
        assert "010_chunk_identity" in [name for name, _ in MIGRATIONS]
        for name, fn in MIGRATIONS:  # the schema as it was before 010
            if name == "010_chunk_identity":
                break
            await db.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
            async with db.transaction():
                await fn(db, SchemaParams())
                await db.execute("INSERT INTO migrations VALUES (?, 'x')", (name,))
        async with db.transaction():
            await ensure_vector_table(db, "numpy", 2)
        rows = [
            (1, "a.md", 1, 3, "h1", "alpha"),
            (2, "a.md", 1, 3, "h1", "alpha"),
            (3, "a.md", 4, 6, "h2", "beta"),
            (4, "b.md", 1, 3, "h1", "alpha"),
            (5, "a.md", 1, 3, "h1", "alpha"),
        ]
        for cid, path, a, b, h, text in rows:
            await db.execute(
                "INSERT INTO chunks(id, path, source, start_line, end_line, hash, text, embedded) "
                "VALUES (?, ?, 'memory', ?, ?, ?, ?, 1)",
                (cid, path, a, b, h, text),
            )
            await db.execute("INSERT INTO chunks_fts(rowid, text, context) VALUES (?, ?, '')", (cid, text))
            await db.execute(
                "INSERT INTO chunks_vec VALUES (?, 'memory', '', ?)",
                (cid, np.array([1, 0], dtype=np.float32).tobytes()),
            )
        assert await migrate(db, SchemaParams()) == [
            "010_chunk_identity",
            "011_chunk_date",
            "012_ledger",
            "013_chunk_id_high",
        ]
        assert [r[0] for r in await db.fetchall("SELECT id FROM chunks ORDER BY id")] == [1, 3, 4]
        assert await get_meta(db, "chunk_id_high") == "4", "an index made before: ids go on past its highest"
        assert [r[0] for r in await db.fetchall("SELECT chunk_id FROM chunks_vec ORDER BY 1")] == [1, 3, 4]
        hits = await db.fetchall("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'alpha' ORDER BY 1")
        assert [r[0] for r in hits] == [1, 4]
        await db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        with pytest.raises(Exception, match="UNIQUE"):
            await db.execute(
                "INSERT INTO chunks(path, source, start_line, end_line, hash, text) "
                "VALUES ('a.md', 'memory', 1, 3, 'h1', 'alpha')"
            )
    finally:
        await db.close()


async def test_closing_while_the_vector_matrix_loads_is_quiet(tmp_path, monkeypatch):
    """`jarvis memory search` on a big index: the search starts loading the vector matrix in the
    background and the command closes the index at once. The load must stop with the index, not fail
    on the closed connection (issue 23: memory_vector_matrix_load_failed ... Connection closed)."""
    import structlog.testing

    from gateway.storage.files.memory import vectors as vectors_mod
    from gateway.storage.files.memory.db import index_driver

    if not index_driver("auto").vec:
        pytest.skip("sqlite-vec is not available here")
    monkeypatch.setattr(vectors_mod, "MATRIX_THRESHOLD", 8)  # a "big" index of a few hundred chunks
    cfg = make_cfg(tmp_path)
    for i in range(300):
        write(cfg.workspace_dir / "memory" / f"n{i}.md", f"# Lamp {i}\n\nThe harbour lamp number {i} is violet.\n")
    for _ in range(5):
        m = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)
        await m.open()
        await m.sync()
        with structlog.testing.capture_logs() as logs:
            assert (await m.search(SearchRequest(query="harbour lamp", mode="vector")))["results"]
            await m.close()
            # Whatever the service left running ends (and would log) before this is looked at; the
            # deadline only catches a hang.
            others = asyncio.all_tasks() - {asyncio.current_task()}
            if others:
                await asyncio.wait(others, timeout=60)
        assert [e for e in logs if e.get("log_level") in ("warning", "error")] == []


async def test_a_refused_rebuild_keeps_the_index_users_lock(tmp_path):
    """Two processes have the index open (the gateway and a `jarvis memory` command; here two lock
    holders, which conflict just the same). One wants it alone for a rebuild and is refused: it must
    still count as a user, or the other one's rebuild would swap the file under its connections.
    (A flock upgrade that is refused drops the shared lock: that was the bug.)"""
    from gateway.errors import Conflict
    from gateway.storage.files.memory.rebuild import IndexUsers

    gateway, cli = IndexUsers(tmp_path / "m.sqlite", "main"), IndexUsers(tmp_path / "m.sqlite", "main")
    await gateway.hold()
    await cli.hold()
    try:
        with pytest.raises(Conflict):
            with gateway.alone():
                pass
        with pytest.raises(Conflict):
            with cli.alone():
                pass
        cli.release()
        with gateway.alone():  # alone now; and given back as shared, so a new user may come
            pass
        await cli.hold(wait_s=0)
    finally:
        gateway.release()
        cli.release()


async def test_a_damaged_index_is_set_aside_only_when_no_other_process_has_it_open(tmp_path):
    """SQLite names a database's WAL by the path it opened: a process closing the moved-aside file last
    would delete the WAL of the new index at that path. So the set-aside waits for the others to go."""
    from gateway.storage.files.memory.rebuild import IndexUsers

    cfg = make_cfg(tmp_path, **{"memory.embeddings.provider": "none"})
    write(cfg.workspace_dir / "MEMORY.md", "# Facts\n\nThe harbour lamp is violet.\n")
    m = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)
    await m.open()
    await m.sync()
    await m.close()
    db = cfg.memory_db()
    with open(db, "r+b") as fh:
        fh.write(b"\0" * 100)
    other = IndexUsers(db, "main")  # a `jarvis memory` command with the damaged index open
    await other.hold()
    m = memory_service(cfg, FilesStorage(cfg), cfg.agent_id)
    opening = asyncio.create_task(m.open())
    try:
        await asyncio.sleep(0.5)
        assert not opening.done() and not list(db.parent.glob("memory.sqlite.corrupt-*"))
        other.release()
        await asyncio.wait_for(opening, 10)
        assert list(db.parent.glob("memory.sqlite.corrupt-*"))
        await m.sync()
        assert (await m.search(SearchRequest(query="harbour lamp")))["results"]
    finally:
        other.release()
        await m.close()


def test_a_note_is_dated_by_its_heading_its_day_file_or_its_front_matter():
    from gateway.memory.index.chunking import note_date, text_date

    assert text_date("## 2026-03-01 — moved") == "2026-03-01T00:00:00.000Z"
    assert text_date("# Tuesday 3rd March 2026") == "2026-03-03T00:00:00.000Z"
    assert text_date("### Sept. 9, 2025: the boat") == "2025-09-09T00:00:00.000Z"
    assert text_date("# 2026-02-30") is None and text_date("# Notes 12 of 2026") is None
    assert note_date("memory/journal/2026-01-05.md", "anything") == "2026-01-05T00:00:00.000Z"
    keyed = "---\nkey: boat\nupdated: 2026-11-22T10:05:00.000Z\n---\n# boat\n\nblue\n"
    assert note_date("memory/keyed/general/boat.md", keyed) == "2026-11-22T10:05:00.000Z"
    assert note_date("memory/trip.md", "---\ndate: 2025-07-04\n---\n# Trip\n") == "2025-07-04T00:00:00.000Z"
    assert note_date("MEMORY.md", "# Me\n\nno date here\n") is None
    pad = " It rained all day and the harbour was quiet, so nothing else happened worth writing down."
    sections = ["# Journal", "## 2026-01-05", "The boat is blue." + pad, "## 2026-02-01", "The boat is green." + pad]
    text = "\n\n".join([*sections, "## Someday", "A trip." + pad]) + "\n"
    chunks = chunk_markdown(text, tokens=30, overlap=0, file_date="F")

    def date_of(words: str) -> str | None:
        return next(c.date for c in chunks if words in c.text)

    assert date_of("boat is blue") == "2026-01-05T00:00:00.000Z"
    assert date_of("boat is green") == "2026-02-01T00:00:00.000Z"
    assert date_of("A trip") == "F"  # under no dated heading: the note's own date


def test_a_transcript_chunk_is_dated_by_its_newest_core_message(tmp_path):
    from gateway.sessions import transcript as tx

    path = tmp_path / "s.jsonl"
    tx.append_sync(
        path,
        [
            tx.header("s", "main", "2026-01-01T00:00:00.000Z"),
            tx.message_record("a", "user", "The gate code is 1234.", timestamp="2026-01-01T09:00:00+01:00"),
            tx.message_record("b", "assistant", "Noted.", timestamp="2026-01-01T08:00:45Z"),
        ],
    )
    [chunk] = chunk_transcript(path, 400, 400)
    assert chunk.date == "2026-01-01T08:00:45.000Z"  # the offset one is 08:00:00 UTC


async def test_a_search_sees_what_a_sync_already_under_way_was_started_to_index(tmp_path, api, open_manager):
    """Read your writes: a turn said just now is being indexed by a background sync (a new session's
    start asked for it) when the next search comes. The dirty mark is cleared as that sync begins, so
    the search must wait for the sync, not go ahead on the index without the turn."""
    import asyncio
    import threading

    cfg = openai_cfg(tmp_path, api, **{"memory.sync.onStart": False})
    m = await open_manager(cfg)
    await m.sync()
    transcript(cfg, "s", [("user", "My locker code at the pool is 4411.")])
    release = threading.Event()
    api.script(("wait", release, 20))  # the background sync's embedding call waits here
    m.schedule_session_sync("s")
    m.session_started("t")  # a sync in the background, covering session s
    for _ in range(200):
        if api.waiting:
            break
        await asyncio.sleep(0.01)
    assert api.waiting == 1 and not m.dirty  # under way, the mark already cleared
    asyncio.get_running_loop().call_later(0.3, release.set)
    res = await m.search(SearchRequest(query="locker code pool", mode="fts"))
    assert [r["path"] for r in res["results"]] == ["sessions/s.jsonl"]
