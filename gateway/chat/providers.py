"""Chat providers behind one small interface, and `make_provider`, which chooses one from the config.

The interface and its errors are provider.py's; each provider is its own module (offline.py,
openai_provider.py, discovered.py); this module names them all, so `from .providers import …` finds any.

A provider has capabilities as attributes (`name`, `model`, `tools_supported`) and two methods:

- `stream(messages, tools=..., model=...)`: an async iterator of `Delta(text)` items that may end with
  `ToolCalls` (the function calls the model made, their streamed argument fragments joined) and a
  `Usage`, passed on as the upstream sent them (`upstream.checked` validates and repairs them before
  the runner uses them). `model=` picks another model than the configured one (a session's). Failures
  raise `Unavailable` with `retryable` set; the runner turns that into `chat.error`.
- `list_models()`: the models it offers as OpenAI model objects. It never fails: without an answer
  from upstream it offers the configured model. The upstream's answer is kept MODELS_TTL_S seconds
  (openai_provider.py), so a client polling `GET /v1/models` (or `chat.models`) does not make every poll
  an upstream request; a failure is not kept, and callers that ask while a request is out share its answer.

For the OpenAI-compatible endpoint (gateway/doors/openai.py) a provider also answers `relay(body,
recalled)`: the client's request forwarded as it is, answered with OpenAI's own chunks (`stream: true`)
or completion object. Its failures raise `UpstreamError`, an `Unavailable` that knows the HTTP status
to answer with.

- `OpenAIProvider` (openai_provider.py): any OpenAI-compatible `/chat/completions` endpoint, streamed.
  Retries before the first byte are the SDK's (bounded by `chat.maxRetries`, honouring
  `Retry-After`/`retry-after-ms`).
- `OfflineResponder` (offline.py): the default with no endpoint configured. It says plainly that it is
  not a language model, shows what memory recalled, and streams in several deltas like a real provider.
- `DiscoveredProvider` (discovered.py): with no model configured, the one found on loopback
  (discovery.py), else the offline responder saying why.
"""

from __future__ import annotations

from ..config import Config
from .discovered import DiscoveredProvider
from .offline import OfflineResponder
from .openai_provider import OpenAIProvider
from .provider import ChatProvider, ToolsRejected, UpstreamError

__all__ = [
    "ChatProvider",
    "DiscoveredProvider",
    "OfflineResponder",
    "OpenAIProvider",
    "ToolsRejected",
    "UpstreamError",
    "make_provider",
]


def make_provider(config: Config) -> ChatProvider:
    if config.chat_provider == "openai":
        c = config.chat
        return OpenAIProvider(
            c.api_key,
            c.base_url,
            c.model,
            c.timeout,
            c.max_retries,
            max_argument_chars=c.max_tool_argument_bytes,
            max_id_chars=c.max_tool_call_id_chars,
            responses_api=c.responses_api,
        )
    if config.discovers:
        return DiscoveredProvider(config)
    return OfflineResponder(config.chat.offline_delta_delay)
