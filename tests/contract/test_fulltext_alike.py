"""Full text ranks alike on both engines: the PostgreSQL engine searches its gateway's FTS5 mirror of the
agent's chunks (storage/postgres/memory/fts_mirror.py) with the files engine's own search
(storage/fts5.py), so the same notes give the same hits, in the same order, with the same scores."""

from __future__ import annotations

import uuid

import pytest

from gateway.storage import open_storage
from gateway.storage.postgres import create_database
from tests.contract.test_memory_index import Opened, write_note
from tests.helpers import make_config, wait_for

NOTES = {
    "MEMORY.md": "# Family\n\nMy sister Ingrid moved to Trondheim in May; she teaches chemistry there.\n\n"
    "# Car\n\nThe car is a blue Volvo whose inspection is due in October.\n",
    "memory/boat.md": "# Boat\n\nMy sailing boat is painted teal and moored in the harbour of Kiel.\n\n"
    "The harbour master in Kiel is called Henrike, and the mooring fee is paid in April.\n",
    "memory/garden.md": "# Garden\n\nThe tomatoes grow by the south wall, next to the rosemary and the thyme.\n\n"
    "Every April the apricot tree by the shed is pruned; the boat's old sail covers it in winter.\n",
    "memory/music.md": "# Music\n\nLena practises the cello every Tuesday evening with her teacher Mr Okafor, "
    "and plays in the harbour church choir's concert in December.\n",
}
QUERIES = [
    "sailing boat harbour",
    "harbour",
    "April",
    "Ingrid Trondheim chemistry",
    "cello teacher Tuesday",
    "apricot tree pruned sail",
    "inspection October Volvo",
    "mooring fee",
]


@pytest.fixture
async def engines(tmp_path, postgres_server):
    url = await create_database(postgres_server, f"c_{uuid.uuid4().hex[:12]}")
    config = {"memory.embeddings.provider": "local"}
    files = await open_storage(make_config(tmp_path / "files", **config))
    pg = await open_storage(make_config(tmp_path / "pg", **{**config, "storage.url": url}))
    try:
        yield files, pg
    finally:
        await files.close()
        await pg.close()


async def test_both_engines_give_the_same_full_text_answers(engines):
    answers = []
    for storage in engines:
        for rel, text in NOTES.items():
            write_note(storage, rel, text)
        async with Opened(storage) as mem:
            await mem.sync()
            mirror = mem.index.status()["fts"].get("mirror")
            if mirror is not None:  # the PostgreSQL engine: its file filled in the background

                async def ready():
                    return mem.index.status()["fts"]["mirror"]["state"] == "ready"

                await wait_for(ready)
            got = []
            for q in QUERIES:
                found = await mem.search(q, "fts", k=8)
                got.append([(h.path, h.start_line, h.end_line, round(h.score, 9)) for h in found.hits])
            if mirror is not None:
                assert mem.index.status()["fts"]["mirror"]["answered"]["postgresql"] == 0
                assert mem.index.status()["fts"]["engine"] == "fts5-mirror"
            answers.append(got)
    files, pg = answers
    assert all(files), files
    for q, f, p in zip(QUERIES, files, pg):
        assert f == p, q
