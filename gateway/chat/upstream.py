"""What a chat provider streams, checked and repaired at the boundary, before the runner sees it.

An upstream (or a proxy in front of it) may send data of the wrong shape; none of it may crash a
run, skip a `seq`, or turn a saved reply into an error:

    delta text      a list of content parts → its text parts joined; an int, dict, bool… → ignored
                    (logged once per run)
    surrogates      a pair split across two deltas (a proxy cutting by UTF-16 units) → joined: a
                    trailing high surrogate waits for the next delta; one that cannot pair → U+FFFD
    tool calls      their id, name and arguments (fragments joined) the same: pairs made whole, lone
                    surrogates → U+FFFD
    usage           token counts must be whole numbers ≥ 0 ("12" and 12.0 are repaired); anything
                    else drops the usage (logged), the reply stands

`checked(stream)` wraps any provider's stream and yields only `Delta(str)`, `ToolCalls` and `Usage(int, int)`.
`paced(chunks, seconds, has_content)` bounds the wait between chunks that carry content: keep-alive
comments (or empty chunks) do not hold off the timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any, AsyncGenerator, AsyncIterator, Callable, TypeVar

import structlog

from .stream import Delta, ToolCalls, Usage

log = structlog.get_logger("gateway.chat")

T = TypeVar("T")
_END: Any = object()

_LONE = re.compile("[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]")


def content_text(content: Any) -> str | None:
    """The text of a delta's `content`: a string as it is, the text parts of a list of parts; None
    for anything else (not text: ignored)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") in ("text", "output_text") and isinstance(p.get("text"), str)
        ]
        return "".join(parts)
    return None


def token_count(value: Any) -> int | None:
    """A token count as a whole number ≥ 0, or None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


class SurrogateJoiner:
    """Joins surrogate pairs split across deltas; replaces surrogates that cannot pair with U+FFFD."""

    def __init__(self) -> None:
        self.held = ""

    def feed(self, text: str) -> str:
        text = self.held + text
        self.held = ""
        if text and "\ud800" <= text[-1] <= "\udbff":  # a high surrogate at the end: its pair may follow
            text, self.held = text[:-1], text[-1]
        return _whole(text)

    def flush(self) -> str:
        text, self.held = self.held, ""
        return _whole(text)


def _whole(text: str) -> str:
    """Pairs made into the characters they stand for; lone surrogates replaced (JSON cannot carry them)."""
    if not any("\ud800" <= ch <= "\udfff" for ch in text):
        return text
    text = _LONE.sub("\ufffd", text)
    return text.encode("utf-16", "surrogatepass").decode("utf-16")


async def checked(stream: AsyncGenerator[Any, None]) -> AsyncGenerator[Delta | ToolCalls | Usage, None]:
    """The provider's stream with every item checked (see the module's docstring)."""
    joiner = SurrogateJoiner()
    ignored: set[str] = set()

    def once(what: str, **fields: Any) -> None:
        if what not in ignored:
            ignored.add(what)
            log.warning(what, **fields)

    async with contextlib.aclosing(stream):  # closing this closes the provider's stream (its HTTP body)
        async for item in stream:
            if isinstance(item, Delta):
                text = content_text(item.text)
                if text is None:
                    once("upstream delta content is not text: ignored", type=type(item.text).__name__)
                    continue
                text = joiner.feed(text)
                if text:
                    yield Delta(text)
            elif isinstance(item, Usage):
                prompt, completion = token_count(item.prompt_tokens), token_count(item.completion_tokens)
                if prompt is None or completion is None:
                    once(
                        "upstream usage has token counts that are not whole numbers: dropped",
                        promptTokens=repr(item.prompt_tokens)[:40],
                        completionTokens=repr(item.completion_tokens)[:40],
                    )
                    continue
                yield Usage(prompt, completion)
            elif isinstance(item, ToolCalls):  # the model's calls end its answer: the text before them is whole
                rest = joiner.flush()
                if rest:
                    yield Delta(rest)
                for call in item.calls:  # whole now (fragments joined): a split pair is adjacent again
                    arguments = _whole(call.arguments)
                    call.size -= len(call.arguments) - len(arguments)
                    call.arguments, call.name, call.id = arguments, _whole(call.name), _whole(call.id)
                yield item
            else:
                once("upstream item of an unknown kind: ignored", type=type(item).__name__)
    rest = joiner.flush()
    if rest:
        yield Delta(rest)


async def paced(chunks: AsyncIterator[T], seconds: float, has_content: Callable[[T], bool]) -> AsyncIterator[T]:
    """`chunks` as they come; TimeoutError once `seconds` pass without one for which `has_content` is
    true (an HTTP client's read timeout restarts with every byte, keep-alive comments included)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    it = aiter(chunks)
    while True:
        async with asyncio.timeout_at(deadline):
            chunk = await anext(it, _END)
        if chunk is _END:
            return
        yield chunk
        if has_content(chunk):
            deadline = loop.time() + seconds
