"""Chat providers behind one small interface.

A provider has capabilities as attributes (`name`, `model`) and one method, `stream(messages)`, an
async iterator of `Delta(text)` items that may end with a `Usage`, passed on as the upstream sent them:
upstream.checked validates and repairs them before the runner uses them. Failures raise
`Unavailable` with `retryable` set; the runner turns that into `chat.error`.

- `OpenAIProvider`: any OpenAI-compatible `/chat/completions` endpoint, streamed. Retries before the
  first byte are the SDK's (bounded by `chat.maxRetries`, honouring `Retry-After`/`retry-after-ms`).
- `OfflineResponder`: the default with no endpoint configured. It says plainly that it is not a
  language model, shows what memory recalled, and streams in several deltas like a real provider.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator

from ..config import Config
from ..errors import Unavailable
from ..sessions.transcript import OFFLINE_PREAMBLE


@dataclass(slots=True)
class Delta:
    text: str


@dataclass(slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    def to_dict(self) -> dict[str, int]:
        return {"promptTokens": self.prompt_tokens, "completionTokens": self.completion_tokens,
                "totalTokens": self.prompt_tokens + self.completion_tokens}


class ChatProvider:
    name = "base"
    model = ""
    # False: the replies are not memory (they only echo the question and what was recalled); the runner
    # marks them `"remember": false` in the transcript and the memory index leaves them out.
    replies_are_memory = True

    def stream(self, messages: list[dict[str, Any]], *, recalled: list[dict[str, Any]] | None = None
               ) -> AsyncIterator[Delta | Usage]:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class OfflineResponder(ChatProvider):
    name = "offline"
    model = "offline-responder"
    replies_are_memory = False
    PREAMBLE = OFFLINE_PREAMBLE

    def __init__(self, delta_delay: float = 0.01):
        self.delta_delay = delta_delay

    @staticmethod
    def compose(user_text: str, recalled: list[dict[str, Any]]) -> str:
        quoted = " ".join(user_text.split())
        if len(quoted) > 200:
            quoted = quoted[:199] + "…"
        lines = [
            f"{OfflineResponder.PREAMBLE}: no chat model is configured "
            "(set OPENAI_API_KEY or OPENAI_BASE_URL to use one).",
            f"You wrote: “{quoted}”",
        ]
        if recalled:
            lines.append("")
            lines.append("From memory I recalled:")
            for r in recalled:
                snippet = " ".join(str(r.get("snippet", "")).split())
                if len(snippet) > 240:
                    snippet = snippet[:239] + "…"
                lines.append(f"- {r['path']}:{r['startLine']}-{r['endLine']} (score {r['score']:.2f}): {snippet}")
        else:
            lines.append("Nothing in memory matched this message.")
        return "\n".join(lines)

    async def stream(self, messages, *, recalled=None):
        user_text = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        text = self.compose(user_text, recalled or [])
        # Stream in word-sized groups so clients exercise real incremental rendering.
        words = text.split(" ")
        step = max(1, len(words) // 12)
        for i in range(0, len(words), step):
            piece = " ".join(words[i : i + step])
            yield Delta(piece if i + step >= len(words) else piece + " ")
            if self.delta_delay:
                await asyncio.sleep(self.delta_delay)
            else:
                await asyncio.sleep(0)
        prompt_chars = sum(len(m["content"]) for m in messages)
        yield Usage(prompt_tokens=prompt_chars // 4, completion_tokens=len(text) // 4)


def _retry_after_ms(exc: Any) -> int | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    for name, factor in (("retry-after-ms", 1), ("retry-after", 1000)):
        value = headers.get(name)
        if value:
            try:
                return int(float(value) * factor)
            except ValueError:
                continue
    return None


class OpenAIProvider(ChatProvider):
    name = "openai"

    def __init__(self, api_key: str, base_url: str, model: str, timeout: float, max_retries: int):
        from openai import AsyncOpenAI

        self.model = model
        self.timeout = timeout
        self.endpoint = (base_url or "https://api.openai.com/v1").rstrip("/")
        # Local servers (llama.cpp, Ollama, vLLM) accept any key; the SDK insists on a non-empty one.
        self.client = AsyncOpenAI(api_key=api_key or "not-needed", base_url=base_url or None,
                                  timeout=timeout, max_retries=max_retries)

    async def stream(self, messages, *, recalled=None):
        import openai

        from .upstream import paced  # upstream.py imports this module's Delta and Usage

        try:
            stream = await self.client.chat.completions.create(
                model=self.model, messages=messages, stream=True,
                stream_options={"include_usage": True},
            )
            async with stream:
                # chat.timeout between chunks with content, not between bytes (see upstream.paced)
                async for chunk in paced(stream, self.timeout, _has_content):
                    # As sent: the runner checks shapes and repairs text (upstream.checked).
                    for choice in chunk.choices or []:
                        text = getattr(choice.delta, "content", None)
                        if text:
                            yield Delta(text)
                    if chunk.usage:
                        yield Usage(chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
        except openai.APITimeoutError:
            raise Unavailable(f"chat provider timed out at {self.endpoint}", retryable=True) from None
        except TimeoutError:
            raise Unavailable(f"chat provider at {self.endpoint} sent no content for {self.timeout:g} s "
                              f"(chat.timeout; keep-alive comments do not count)", retryable=True) from None
        except openai.APIStatusError as exc:
            status = exc.status_code
            retryable = status == 429 or status == 408 or status >= 500
            raise Unavailable(f"chat provider at {self.endpoint} answered HTTP {status}: {_short(exc.message)}",
                                      retryable=retryable, retry_after_ms=_retry_after_ms(exc)) from None
        except openai.APIConnectionError as exc:
            raise Unavailable(f"chat provider unreachable at {self.endpoint}: {connection_failure(exc)}",
                                      retryable=True) from None
        except Exception as exc:  # a stream cut mid-way surfaces as the HTTP library's own error
            raise Unavailable(f"chat provider at {self.endpoint} failed: {type(exc).__name__}: "
                                      f"{_short(str(exc))}", retryable=True) from None

    async def close(self) -> None:
        await self.client.close()


def _has_content(chunk: Any) -> bool:
    """Whether a stream chunk carries something: text, a tool call, or the usage."""
    return bool(chunk.usage) or any(getattr(c.delta, "content", None) or getattr(c.delta, "tool_calls", None)
                                    for c in chunk.choices or [])


def connection_failure(exc: BaseException) -> str:
    """Why a connection failed, in a few words: the first cause in the chain that says more than
    the SDK's own "Connection error."."""
    import socket

    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cur, socket.gaierror):
            return "host name not found"
        if isinstance(cur, (TimeoutError, socket.timeout)):
            return "timed out"
        text = str(cur)
        if "Connection refused" in text or "Connect call failed" in text:
            return "connection refused"
        if "Name or service not known" in text or "nodename nor servname" in text or "getaddrinfo failed" in text:
            return "host name not found"
        cur = cur.__cause__ or cur.__context__
    text = _short(str(exc))
    return text.rstrip(".").lower() if text else type(exc).__name__


def _short(text: str, n: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def make_provider(config: Config) -> ChatProvider:
    if config.chat_provider == "openai":
        c = config.chat
        return OpenAIProvider(c.api_key, c.base_url, c.model, c.timeout, c.max_retries)
    return OfflineResponder(config.chat.offline_delta_delay)
