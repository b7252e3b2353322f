"""pgvector's `vector` as the gateway exchanges it: the text form (a few vectors read), the binary codec
(what a sync writes), and `vector_send`'s bytes as float32 rows (what the in-memory matrix loads: see
vector_search.py). The vector table is db.py's VECTOR_MIGRATIONS; it has no HNSW index (v002 drops it):
the gateway searches vectors in memory."""

from __future__ import annotations

import struct
import weakref
from typing import Any

import numpy as np
import orjson


def vector_text(v: np.ndarray) -> str:
    """A vector in pgvector's text form ('[1,2,3]'): sent as text and cast, so no codec is needed."""
    return "[" + ",".join(f"{x:.8g}" for x in np.asarray(v, dtype=np.float32).tolist()) + "]"


def parse_vector(text: str) -> np.ndarray:
    return np.array(orjson.loads(text), dtype=np.float32)


_VECTOR_HEAD = struct.Struct(">HH")  # pgvector's binary form: dims, an unused word, then big-endian float4s


def vector_binary(v: np.ndarray) -> bytes:
    """A vector in pgvector's binary form (`vector_recv`): what a sync's COPY sends, ~1 µs a vector where
    the text form took ~100 µs of formatting in Python and as much parsing in the server."""
    a = np.asarray(v, dtype=">f4")
    return _VECTOR_HEAD.pack(a.shape[0], 0) + a.tobytes()


def vector_unbinary(data: bytes) -> np.ndarray:
    dims, _ = _VECTOR_HEAD.unpack_from(data)
    return np.frombuffer(data, dtype=">f4", count=dims, offset=_VECTOR_HEAD.size).astype(np.float32)


_BINARY_VECTORS: "weakref.WeakSet[Any]" = weakref.WeakSet()  # connections that have the codec


async def binary_vectors(conn: Any) -> None:
    """pgvector's `vector` exchanged in binary on this connection (once per connection: a codec is the
    connection's, and setting one drops its prepared statements). Every query of ours that reads a vector
    casts it to text first, so only what is written this way changes."""
    raw = getattr(conn, "_con", conn)  # a pool's connection proxy: the codec belongs to the connection
    if raw in _BINARY_VECTORS:
        return
    schema = await conn.fetchval("SELECT typnamespace::regnamespace::text FROM pg_type WHERE oid = 'vector'::regtype")
    await conn.set_type_codec("vector", schema=schema, encoder=vector_binary, decoder=vector_unbinary, format="binary")
    _BINARY_VECTORS.add(raw)


def sent_vectors(blobs: list[bytes], dims: int) -> np.ndarray:
    """`vector_send(embedding)` values of `dims` dimensions (a 4-byte head, then big-endian float4s) as
    float32 rows, in one pass over their bytes."""
    k = len(blobs)
    if k == 0:
        return np.empty((0, dims), dtype=np.float32)
    raw = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(k, _VECTOR_HEAD.size + 4 * dims)
    return np.ascontiguousarray(raw[:, _VECTOR_HEAD.size :]).view(">f4").astype(np.float32)
