"""Images in memory end to end: stored with a searchable sidecar, read back byte for byte, validated
(base64, size, PNG/JPEG by magic bytes), durable, per agent; image search refuses clearly when the
embedding provider cannot embed images."""

from __future__ import annotations

import base64
import stat
import struct
import zlib

import pytest

from tests.helpers import RpcError


def png(width: int = 2, height: int = 2, rgb: tuple[int, int, int] = (255, 0, 0)) -> bytes:
    """A real, valid PNG of one colour."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" + b"\x00" * 64 + b"\xff\xd9"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_set_get_search_and_restart(start_gateway):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    ws = gw.config.workspace_dir
    data = png()
    made = await c.call(
        "memory.setImage",
        {"key": "receipt", "image": b64(data), "description": "Hotel receipt from the Lisbon trip, paid by card."},
    )
    assert made["mimeType"] == "image/png" and made["bytes"] == len(data) and made["replaced"] is False
    assert made["path"] == "memory/images/receipt.md" and made["imagePath"] == "memory/images/receipt.png"
    assert (ws / made["imagePath"]).read_bytes() == data
    for rel in (made["path"], made["imagePath"]):
        assert stat.S_IMODE((ws / rel).stat().st_mode) == 0o600
    hits = (await c.call("memory.search", {"query": "Lisbon hotel receipt", "mode": "fts"}))["results"]
    assert [h["path"] for h in hits] == ["memory/images/receipt.md"], "the description is searchable at once"

    got = await c.call("memory.getImage", {"key": "receipt"})
    assert base64.b64decode(got["image"]) == data
    assert {k: got[k] for k in ("key", "mimeType", "bytes", "description")} == {
        "key": "receipt",
        "mimeType": "image/png",
        "bytes": len(data),
        "description": "Hotel receipt from the Lisbon trip, paid by card.",
    }

    # Replacing with a JPEG (given as a data URL, with line breaks) swaps the file.
    wrapped = "data:image/jpeg;base64," + "\n".join(b64(JPEG)[i : i + 20] for i in range(0, len(b64(JPEG)), 20))
    again = await c.call("memory.setImage", {"key": "receipt", "image": wrapped})
    assert again["mimeType"] == "image/jpeg" and again["replaced"] is True and again["created"] == made["created"]
    assert not (ws / "memory/images/receipt.png").exists() and (ws / "memory/images/receipt.jpg").is_file()
    hits = (await c.call("memory.search", {"query": "Lisbon hotel receipt", "mode": "fts"}))["results"]
    assert [h["path"] for h in hits] == ["memory/images/receipt.md"], "no description given: the old one stays"
    await c.call("memory.setImage", {"key": "receipt", "image": b64(JPEG), "description": "A parking ticket"})
    assert (await c.call("memory.search", {"query": "Lisbon", "mode": "fts"}))["results"] == []
    await c.close()

    await gw.restart()
    c = await gw.client()
    got = await c.call("memory.getImage", {"key": "receipt"})
    assert got["mimeType"] == "image/jpeg" and base64.b64decode(got["image"]) == JPEG
    assert got["description"] == "A parking ticket"
    await c.close()


async def test_bad_images_are_refused_naming_the_rule(start_gateway):
    gw = await start_gateway(memory=True, **{"memory.imageMaxBytes": 2000})
    c = await gw.client()
    for params, field, words in (
        ({"key": "x", "image": "not base64 at all!"}, "params.image", "not valid base64"),
        ({"key": "x", "image": "QUJDRA"}, "params.image", "not valid base64"),
        ({"key": "x", "image": b64(b"GIF89a" + b"\x00" * 40)}, "params.image", "not a PNG or JPEG"),
        ({"key": "x", "image": b64(b"%PDF-1.7 hello")}, "params.image", "not a PNG or JPEG"),
        ({"key": "x", "image": b64(png(80, 80) + b"\x00" * 3000)}, "params.image", "too large"),
        ({"key": "../x", "image": b64(png())}, "params.key", "must match"),
        ({"key": "x", "image": b64(png()), "description": "d" * 4001}, "params.description", "at most 4000"),
    ):
        with pytest.raises(RpcError) as ei:
            await c.call("memory.setImage", params)
        assert ei.value.code == -32602 and ei.value.data["field"] == field, (params.get("key"), ei.value.message)
        assert words in ei.value.message, ei.value.message
    assert not (gw.config.workspace_dir / "memory" / "images").exists() or not any(
        (gw.config.workspace_dir / "memory" / "images").glob("x.*")
    )
    with pytest.raises(RpcError) as ei:
        await c.call("memory.getImage", {"key": "nothing-here"})
    assert ei.value.code == -32004
    await c.close()


async def test_image_search_needs_a_multimodal_provider(start_gateway):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    with pytest.raises(RpcError) as ei:
        await c.call("memory.searchImage", {"image": b64(png()), "k": 3})
    assert ei.value.code == -32050 and ei.value.data["retryable"] is False
    assert "cannot embed images" in ei.value.message and "local" in ei.value.message
    with pytest.raises(RpcError) as ei:  # the input is still checked first
        await c.call("memory.searchImage", {"image": b64(b"plain text")})
    assert ei.value.code == -32602
    await c.close()


async def test_images_belong_to_their_agent(start_gateway):
    gw = await start_gateway(memory=True)
    c = await gw.client()
    await c.call("sessions.create", {"agentId": "travel"})
    await c.call(
        "memory.setImage",
        {"agentId": "travel", "key": "map", "image": b64(png()), "description": "Hiking map of the Azores"},
    )
    assert (await c.call("memory.getImage", {"agentId": "travel", "key": "map"}))["bytes"] == len(png())
    with pytest.raises(RpcError) as ei:
        await c.call("memory.getImage", {"key": "map"})
    assert ei.value.code == -32004
    assert (await c.call("memory.search", {"query": "Azores hiking", "mode": "fts"}))["results"] == []
    hits = (await c.call("memory.search", {"query": "Azores hiking", "mode": "fts", "agentId": "travel"}))["results"]
    assert [h["path"] for h in hits] == ["memory/images/map.md"]
    await c.close()


async def test_search_image_with_a_multimodal_provider(start_gateway):
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI() as api:
        gw = await start_gateway(
            memory=True,
            **{
                "memory.embeddings.provider": "openai",
                "memory.embeddings.baseUrl": api.base_url,
                "memory.embeddings.model": "fake-vl-embed",
                "memory.embeddings.multimodal": True,
            },
        )
        c = await gw.client()
        images = {
            "sunset": png(24, 24, (250, 90, 20)),
            "sea": png(40, 8, (10, 60, 200)),
            "forest": png(8, 40, (20, 140, 30)),
        }
        for key, data in images.items():
            await c.call("memory.setImage", {"key": key, "image": b64(data), "description": f"a photo: {key}"})
        found = await c.call("memory.searchImage", {"image": b64(images["sea"]), "k": 2})
        assert [r["key"] for r in found["results"]][0] == "sea" and len(found["results"]) == 2
        top = found["results"][0]
        assert top["score"] > 0.99 and top["score"] > found["results"][1]["score"]
        assert top["description"] == "a photo: sea" and top["imagePath"] == "memory/images/sea.png"
        assert found["embeddings"] == {"provider": "openai", "model": "fake-vl-embed"}
        image_requests = lambda: [
            r
            for r in api.requests
            if r["path"] == "/v1/embeddings"  # noqa: E731
            and isinstance(r["body"]["input"][0], dict)
        ]
        before = len(image_requests())
        await c.call("memory.searchImage", {"image": b64(images["forest"])})
        assert len(image_requests()) == before + 1, "stored images come from the cache; only the query is embedded"
        await c.close()


async def test_image_search_while_a_damaged_index_waits_to_be_set_aside_is_a_clear_retryable_error(start_gateway):
    """A damaged index met while serving is set aside once no other process has it open (a `jarvis
    memory` command beside the gateway: up to 30 s). Meanwhile the index has no connection; image search
    read the embedding cache through it anyway and failed with an internal error (-32603)."""
    import asyncio
    import os

    from gateway.fsutil import SHARED, UNLOCK, ofd_lock
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI() as api:
        gw = await start_gateway(
            memory=True,
            **{
                "memory.embeddings.provider": "openai",
                "memory.embeddings.baseUrl": api.base_url,
                "memory.embeddings.model": "fake-vl-embed",
                "memory.embeddings.multimodal": True,
                "memory.search.mode": "fts",
                "memory.sync.onSearch": False,
            },
        )
        c = await gw.client()
        sea = png(40, 8, (10, 60, 200))
        await c.call("memory.setImage", {"key": "sea", "image": b64(sea), "description": "a photo: the sea"})
        notes = gw.config.workspace_dir / "memory"
        for i in range(200):
            (notes / f"note-{i:03}.md").write_text(f"# Note {i}\n\n" + f"harbour words number {i} " * 60 + "\n")
        await c.call("memory.sync")
        assert (await c.call("memory.searchImage", {"image": b64(sea)}))["results"][0]["key"] == "sea"

        assert (await c.call("memory.search", {"query": "harbour", "k": 1}))["results"]

        db = gw.config.memory_db()
        users = os.open(str(db) + ".users", os.O_RDWR)  # another process has the index open
        assert ofd_lock(users, SHARED)
        try:
            for path, keep in ((db, 4096), (db.with_name(db.name + "-wal"), 32)):  # all but the headers
                if path.exists() and path.stat().st_size > keep:
                    with open(path, "r+b") as fh:
                        fh.seek(keep)
                        fh.write(b"\xa5" * (path.stat().st_size - keep))
            with pytest.raises(RpcError) as exc:
                await c.call("memory.search", {"query": "harbour words number 7", "k": 3})
            assert exc.value.code == -32050 and "damaged" in exc.value.message
            await asyncio.sleep(0.5)  # the recovery has closed the index and waits for the other process
            with pytest.raises(RpcError) as exc:
                await c.call("memory.searchImage", {"image": b64(sea)})
            assert exc.value.code != -32603, exc.value.message
            assert exc.value.data.get("retryable") is True, exc.value.data
        finally:
            ofd_lock(users, UNLOCK)
            os.close(users)
        for _ in range(100):  # alone again: set aside, rebuilt, and image search answers again
            try:
                found = await c.call("memory.searchImage", {"image": b64(sea)})
                break
            except RpcError:
                await asyncio.sleep(0.2)
        assert found["results"][0]["key"] == "sea"
        await c.close()
