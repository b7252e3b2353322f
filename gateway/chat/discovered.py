"""`DiscoveredProvider`: chat through a model server found on this machine's loopback (discovery.py finds
it), or through the offline responder while none answers, saying why."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, AsyncGenerator

import structlog

from ..config import Config
from ..neterrors import short as _short
from .offline import OfflineResponder
from .openai_provider import OpenAIProvider
from .provider import ChatProvider, UpstreamError

log = structlog.get_logger("gateway.chat")


RETIRED_KEPT = 4  # providers of servers left behind kept open (a turn may still be streaming from one)
RETRY_S = 5.0  # while no server answers, a chat turn asks again at most this often (`jarvis models` always)


class DiscoveredProvider(ChatProvider):
    """Chat through a model server found on loopback (chat/discovery.py), or the offline responder while
    none answers, saying why. It stands where one provider is expected (the runner, compaction, /v1 hold
    one object for the gateway's life) and passes each call to the provider of the moment:

    - asked at start (`start()`, in the background), by `list_models()` (`chat.models`, `jarvis models`,
      the web page's picker) every time, and by a chat turn while none answers, at most every RETRY_S;
    - a turn whose server does not answer (refused: it went away) is answered by the offline responder,
      the reason in its text; the next turn past RETRY_S asks again and comes back to the server.
    """

    def __init__(self, config: Config):
        self.config = config
        self.offline = OfflineResponder(config.chat.offline_delta_delay, why=lambda: self.reason)
        self.current: ChatProvider = self.offline
        self.found: Any = None  # discovery.Found of the current server
        self.reason = "looking for a model server on this machine (chat.discover)"
        self._probe: asyncio.Task[None] | None = None
        self._asked = -float("inf")  # time.monotonic() of the last probe's start
        self._old: list[ChatProvider] = []  # providers of servers left behind, closed with this one
        self._closing: set[asyncio.Task[None]] = set()

    # What callers read of a provider is the current one's.
    @property
    def name(self) -> str:  # type: ignore[override]
        return self.current.name

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.current.model

    @property
    def replies_are_memory(self) -> bool:  # type: ignore[override]
        return self.current.replies_are_memory

    @property
    def tools_supported(self) -> bool:  # type: ignore[override]
        return self.current.tools_supported

    @property
    def responses_api(self) -> str:  # type: ignore[override]
        return self.current.responses_api

    @property
    def tools_refused(self) -> frozenset[str]:
        return self.current.tools_refused

    @tools_refused.setter
    def tools_refused(self, value: frozenset[str]) -> None:
        self.current.tools_refused = value

    @property
    def endpoint(self) -> str | None:
        return self.found.base_url if self.current is not self.offline else None

    @property
    def offline_now(self) -> bool:  # type: ignore[override]
        return self.current is self.offline

    def describe(self) -> dict[str, Any]:
        if self.current is self.offline:
            return {**self.offline.describe(), "reason": self.reason}
        return {**self.current.describe(), "discovered": True, "server": self.found.server}

    def start(self) -> asyncio.Task[None]:
        """The first probe, in the background: start-up never waits on it past `settled`."""
        return self._ask()

    async def settled(self, timeout: float) -> None:
        """Wait (without blocking the loop) up to `timeout` s for the probe out now, so the start-up line can say."""
        if self._probe is not None and not self._probe.done():
            await asyncio.wait([self._probe], timeout=timeout)

    async def discover(self) -> None:
        """Ask now (or share the probe already out)."""
        await asyncio.shield(self._ask())

    def _ask(self) -> asyncio.Task[None]:
        if self._probe is None or self._probe.done():
            self._asked = time.monotonic()
            self._probe = asyncio.create_task(self._run_probe(), name="chat-discovery")
        return self._probe

    async def _run_probe(self) -> None:
        from .discovery import discover

        try:
            found, why = await discover(self.config.chat.discover_ports)
        except Exception as exc:  # never the turn's failure: the offline responder says it
            found, why = None, f"looking for a model server failed: {type(exc).__name__}: {_short(str(exc))}"
        if found is None:
            self._lose(why)
            return
        if self.found == found and self.current is not self.offline:
            return
        same = self.found is not None and (self.found.base_url, self.found.model) == (found.base_url, found.model)
        if not (same and isinstance(self.current, OpenAIProvider)):
            c = self.config.chat
            provider = OpenAIProvider(
                "",
                found.base_url,
                found.model,
                c.timeout,
                0,  # a server that goes away falls back at once; the next turn asks again
                max_argument_chars=c.max_tool_argument_bytes,
                max_id_chars=c.max_tool_call_id_chars,
                responses_api="translate",  # local servers have chat completions; few have /v1/responses
            )
            if self.current is not self.offline:
                self._retire(self.current)
            self.current = provider
        self.found = found
        self.reason = ""
        log.info(
            "chat model discovered",
            server=found.server,
            chat_url=found.base_url,
            chat_model=found.model,
            models=len(found.models),
        )

    def _lose(self, why: str) -> None:
        if self.current is not self.offline:
            log.warning("discovered chat model gone; the offline responder answers", chat_url=self.endpoint, reason=why)
            self._retire(self.current)
            self.current = self.offline
        self.reason = why

    def _retire(self, provider: ChatProvider) -> None:
        """A provider left behind (its server went away or changed): kept while a turn may still stream from
        it, closed once RETIRED_KEPT newer ones followed (a server that comes and goes for days holds no more)."""
        self._old.append(provider)
        while len(self._old) > RETIRED_KEPT:
            task = asyncio.create_task(self._old.pop(0).close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _now(self) -> ChatProvider:
        """The provider for a turn: while none answers, ask again when the last probe is RETRY_S old."""
        if self.current is self.offline and time.monotonic() - self._asked >= RETRY_S:
            await self.discover()
        return self.current

    def _gone(self, provider: ChatProvider, exc: UpstreamError) -> bool:
        """Whether `exc` says the server went away: then the offline responder answers, saying so."""
        if not exc.unreachable or provider is self.offline:
            return False
        if provider is self.current:
            why = exc.message.rsplit(": ", 1)[-1]  # "chat provider unreachable at URL: connection refused"
            self._lose(f"the model server found at {self.endpoint} stopped answering ({_short(why)})")
            self._asked = time.monotonic()
        return True

    async def stream(self, messages, *, recalled=None, tools=None, tool_choice=None, model=None):
        provider = await self._now()
        started = False
        try:
            async with contextlib.aclosing(
                provider.stream(messages, recalled=recalled, tools=tools, tool_choice=tool_choice, model=model)
            ) as items:
                async for item in items:
                    started = True
                    yield item
            return
        except UpstreamError as exc:
            if started or not self._gone(provider, exc):
                raise
        async with contextlib.aclosing(self.offline.stream(messages, recalled=recalled)) as items:
            async for item in items:
                yield item

    async def relay(self, body, recalled):
        provider = await self._now()
        try:
            return await provider.relay(body, recalled)
        except UpstreamError as exc:
            if not self._gone(provider, exc):
                raise
        return await self.offline.relay(body, recalled)

    async def respond(self, body: dict[str, Any]) -> AsyncGenerator[Any, None]:
        provider = self.current
        if provider is self.offline:  # it went away since the turn chose how to ask
            raise UpstreamError(f"no chat model: {self.reason}", 502, retryable=True)
        return await provider.respond(body)

    async def list_models(self) -> list[dict]:
        # Asked while none answers: look now. With a server in use, at most every RETRY_S (a client polling
        # GET /v1/models does not make each poll a round of probes).
        if self.current is self.offline or time.monotonic() - self._asked >= RETRY_S:
            await self.discover()
        return await self.current.list_models()

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
        for provider in {id(p): p for p in [*self._old, self.current]}.values():
            await provider.close()
