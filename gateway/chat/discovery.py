"""A model server on this machine, found without being told (chat.discover).

With no chat model configured, the gateway asks the usual local servers for their models — Ollama
(11434: `/v1/models`, else its own `/api/tags`), llama.cpp's server (8080), LM Studio (1234), vLLM (8000),
the ports of `chat.discoverPorts` — and chats with the first that answers with a model. Only loopback is
ever asked (127.0.0.1 and ::1: no setting names a host), every port at once, each with a short timeout
and a bounded answer, so a probe takes at most PROBE_TIMEOUT_S whatever listens there. Pure I/O and
parsing: which provider chats is discovered.py's `DiscoveredProvider`'s.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson

LOOPBACK = ("127.0.0.1", "::1")
KNOWN = {11434: "Ollama", 8080: "llama.cpp", 1234: "LM Studio", 8000: "vLLM"}  # by their default ports
PROBE_TIMEOUT_S = 1.0  # a port's whole answer (connect, headers, body)
MAX_ANSWER_BYTES = 1 << 20  # a model list past this is no model server's
OWNERS = {"llamacpp": "llama.cpp", "vllm": "vLLM", "ollama": "Ollama", "library": "Ollama"}


@dataclass(frozen=True)
class Found:
    """A server that answered with at least one chat model."""

    base_url: str  # its OpenAI-compatible root: http://127.0.0.1:11434/v1
    server: str  # what it is, as far as its answer or its port tells: "Ollama", "llama.cpp", …
    models: tuple[str, ...]  # its chat models (embedding models left out), the first the one used

    @property
    def model(self) -> str:
        return self.models[0]


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def chat_models(ids: list[str]) -> list[str]:
    """The ids that name chat models: an embedding model (nomic-embed-text, bge-m3's "embed") cannot chat."""
    return [i for i in ids if "embed" not in i.lower()]


def parse_models(body: bytes, ollama_tags: bool) -> tuple[list[str], str | None]:
    """(model ids, the owner the answer names) of a `/v1/models` answer, or of Ollama's `/api/tags`."""
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return [], None
    items = data.get("models" if ollama_tags else "data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return [], None
    ids: list[str] = []
    owner = None
    for item in items:
        if not isinstance(item, dict):
            continue
        name = item.get("name") or item.get("model") if ollama_tags else item.get("id")
        if isinstance(name, str) and name.strip() and len(name) <= 256:
            ids.append(name)
        if owner is None and isinstance(item.get("owned_by"), str):
            owner = item["owned_by"]
    return ids, ("ollama" if ollama_tags else owner)


async def _get(client: Any, url: str) -> bytes | None:
    """The body of a 200 answer, at most MAX_ANSWER_BYTES; None for anything else."""
    async with client.stream("GET", url) as response:
        if response.status_code != 200:
            return None
        body = bytearray()
        async for piece in response.aiter_bytes():
            body += piece
            if len(body) > MAX_ANSWER_BYTES:
                return None
        return bytes(body)


async def probe_one(client: Any, host: str, port: int) -> Found | str:
    """What one loopback address answers: a Found, or why it is none (a few words)."""
    root = f"http://{_host(host)}:{port}"
    try:
        ids: list[str] = []
        owner = None
        body = await _get(client, f"{root}/v1/models")
        if body is not None:
            ids, owner = parse_models(body, ollama_tags=False)
        if not chat_models(ids):
            tags = await _get(client, f"{root}/api/tags")  # Ollama before its OpenAI routes, or without models there
            if tags is not None:
                ids, owner = parse_models(tags, ollama_tags=True)
    except Exception as exc:  # refused, reset, too slow, not HTTP: nothing there for us
        return type(exc).__name__
    models = chat_models(ids)
    if not models:
        return "answered with no chat model" if ids or body is not None else "no model list"
    server = OWNERS.get((owner or "").lower()) or KNOWN.get(port) or "a model server"
    return Found(f"{root}/v1", server, tuple(models))


async def discover(ports: list[int], timeout: float = PROBE_TIMEOUT_S) -> tuple[Found | None, str]:
    """The first (in `ports` order, 127.0.0.1 before ::1) loopback server that answers with a chat model,
    else None and why, for the offline responder to say. Every address is asked at once."""
    import httpx2 as httpx  # the HTTP client the openai and mcp packages bring

    if not ports:
        return None, "chat.discoverPorts is empty"
    addresses = [(host, port) for port in ports for host in LOOPBACK]
    limits = httpx.Timeout(timeout)
    async with httpx.AsyncClient(timeout=limits, trust_env=False, follow_redirects=False) as client:

        async def bounded(host: str, port: int) -> Found | str:
            try:
                return await asyncio.wait_for(probe_one(client, host, port), timeout)
            except TimeoutError:
                return "no answer in time"

        answers = await asyncio.gather(*(bounded(h, p) for h, p in addresses))
    for answer in answers:
        if isinstance(answer, Found):
            return answer, ""
    spoke = [f"{_host(h)}:{p} {a}" for (h, p), a in zip(addresses, answers) if "no chat model" in str(a)]
    where = ", ".join(str(p) for p in ports)
    return None, f"no model server answered on loopback ports {where}" + (f" ({'; '.join(spoke)})" if spoke else "")


def summary(chat: dict[str, Any]) -> str:
    """system.health's `chat` in one line, for people: the start-up line, `jarvis chat`, `jarvis models`."""
    if chat.get("provider") == "offline":
        why = chat.get("reason") or "no chat model is configured"
        return f"the offline responder ({why}; set chat.baseUrl or OPENAI_BASE_URL, or start a local model server)"
    where = chat.get("baseUrl") or "the provider's default endpoint"
    if chat.get("discovered"):
        return f"{chat.get('model')} on {chat.get('server') or 'a model server'} at {where} (found on this machine)"
    return f"{chat.get('model')} at {where}"
