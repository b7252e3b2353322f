"""[chat] and [openaiApi]: the chat model, its tools and their limits, and the OpenAI-compatible door."""

from __future__ import annotations

from dataclasses import dataclass

from .fields import setting


TOOL_POLICIES = ("ask", "allow", "deny")  # chat.toolPolicy's values


@dataclass
class ChatConfig:
    provider: str = setting(
        "auto",
        choices=("auto", "openai", "offline"),
        doc="auto: openai when an API key or base URL is set, else offline",
    )
    api_key: str = setting("", doc="OPENAI_API_KEY")
    base_url: str = setting("", doc="OPENAI_BASE_URL, any OpenAI-compatible endpoint")
    model: str = setting("gpt-4o-mini", doc="the chat model asked for (JARVIS_CHAT_MODEL); a session may pick another")
    timeout: float = setting(
        60.0,
        ge=0.1,
        doc="seconds per provider request, and between streamed chunks with content (keep-alive comments do not count)",
    )
    max_retries: int = setting(
        2,
        ge=0,
        le=10,
        doc="retries of a provider request that failed before its first byte (the SDK's, honouring Retry-After)",
    )
    responses_api: str = setting(
        "auto",
        choices=("auto", "upstream", "translate"),
        doc="how /v1/responses reaches the upstream: its own /v1/responses (upstream), as chat completions "
        "(translate: Ollama, llama.cpp), or auto: its own until it answers 404/405/501 there, then translated",
    )
    history_messages: int = setting(20, ge=1, le=1000, doc="messages of the session sent with each turn")
    system_prompt: str = setting(
        "You are Jarvis, a helpful personal assistant with long-term memory. "
        "Use the recalled memory below when it is relevant; say so when you do not know.",
        doc="the system prompt of every turn (recalled memory is added below it); a session may set its own",
    )
    max_reply_chars: int = setting(200_000, ge=1, doc="an assistant reply is cut here (chat.final says truncated)")
    idempotency_ttl: float = setting(600.0, ge=1.0, doc="seconds an idempotencyKey is remembered")
    offline_delta_delay: float = setting(0.01, ge=0.0, le=5.0, doc="seconds between the offline responder's deltas")
    compact_budget_tokens: int = setting(
        6000,
        ge=0,
        doc="history size (≈ chars/4) past which older messages are "
        "flushed into memory/YYYY-MM-DD.md; 0 = only by sessions.compact",
    )
    compact_keep_recent: int = setting(10, ge=1, le=1000, doc="messages kept verbatim when a session is compacted")
    tools: bool | list[str] = setting(
        True,
        doc="memory tools the chat model may call (OpenAI-compatible providers): true "
        "for all, false for none, or a list of names (memory_search, memory_get, "
        "memory_set, memory_delete, memory_list, memory_recall)",
    )
    max_tool_steps: int = setting(
        5,
        ge=1,
        le=50,
        doc="rounds of tool calls in one run; past it the model must answer and the reply says the limit was reached",
    )
    tool_policy: dict[str, str] = setting(
        factory=dict,
        doc="per destructive tool (memory_delete; memory_set where it would overwrite a key): "
        '"ask" (the default: the run pauses with chat.confirm until a client answers), "allow" or "deny"; '
        "where no client can answer (a /v1 relay, a run nobody watches) ask means deny",
    )
    confirm_seconds: float = setting(
        60.0, ge=0.1, le=3600.0, doc="seconds a chat.confirm waits for an answer; no answer is a denial"
    )
    max_destructive_per_run: int = setting(
        3, ge=0, le=1000, doc="destructive tool calls one run may make (asked or allowed); past it they are denied"
    )
    max_tool_argument_bytes: int = setting(
        1 << 20,
        ge=1024,
        le=64 << 20,
        doc="tool-call arguments one answer of the model may carry in all (UTF-8); calls past it are refused, "
        "their arguments stored cut with a note",
    )
    max_tool_call_id_chars: int = setting(
        128, ge=16, le=4096, doc="a tool call's id as the model sent it; a longer one is replaced by the gateway's own"
    )
    discover: bool = setting(
        True,
        doc="with no chat model configured (provider auto, no apiKey or baseUrl), look for a model server on "
        "this machine's loopback (127.0.0.1, ::1) at chat.discoverPorts, at start and when asked (jarvis models, "
        "chat.models), and chat with the first that answers with a model; false: the offline responder",
    )
    discover_ports: list[int] = setting(
        factory=lambda: [11434, 8080, 1234, 8000],
        doc="loopback ports discovery asks, in order: Ollama 11434, llama.cpp's server 8080, LM Studio 1234, vLLM 8000",
    )


@dataclass
class OpenAIApiConfig:
    memory: bool = setting(
        True,
        doc="/v1/chat/completions adds recalled memory to the system prompt (per request: header X-Jarvis-Memory: off)",
    )
    capture: bool = setting(
        True,
        doc="/v1/chat/completions keeps each user message and reply in a session's "
        "transcript, indexed as memory (per request: header X-Jarvis-Capture: off)",
    )
    stored_responses: int = setting(
        1000,
        ge=0,
        le=1_000_000,
        doc="/v1/responses kept per principal in the storage engine (every gateway on it reads them) for "
        "GET /v1/responses/{id} and previous_response_id, the oldest evicted past it; 0 keeps none",
    )
    stored_response_bytes: int = setting(
        64 << 20,
        ge=0,
        le=1 << 40,
        doc="bytes of /v1/responses kept per principal (their JSON), the oldest evicted past it; a response "
        "bigger than this alone is answered but not kept",
    )
    stored_response_days: float = setting(
        30.0,
        ge=0.0,
        le=36_500.0,
        doc="days a kept /v1/responses response is readable and continuable; older ones are purged",
    )
    max_messages: int = setting(
        4096,
        ge=1,
        le=1_000_000,
        doc="messages (or input items) in one /v1 request; past it 400 array_above_max_length (the body's "
        "bytes: server.httpMaxBodyBytes, 413)",
    )
