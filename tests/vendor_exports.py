"""Small data exports in ChatGPT's and Claude's real shapes, for the import tests and the benchmark.

The shapes are those of the vendors' "export data" zips (as documented by the projects that parse them):

- ChatGPT: `conversations.json`, an array of conversations; each has `title`, `create_time` /
  `update_time` (Unix seconds), `mapping` (node id → {id, message, parent, children}: a tree, where an
  edited question or a regenerated answer is a second child), `current_node` (the leaf the person saw
  last), `conversation_id` / `id` and a dozen flags. A message has `id`, `author` {role, name, metadata},
  `create_time`, `update_time`, `content` {content_type, parts | text | …}, `status`, `end_turn`,
  `weight`, `metadata`, `recipient`, `channel`. The root node has no message; the first message is a
  hidden, empty system one.
- Claude: `conversations.json`, an array of conversations; each has `uuid`, `name`, `summary`,
  `created_at` / `updated_at` (ISO 8601 with microseconds), `account` {uuid}, `chat_messages`: each
  with `uuid`, `text`, `content` (blocks: text, thinking, tool_use, tool_result), `sender`
  (human | assistant), `created_at`, `updated_at`, `attachments` (file_name, file_size, file_type,
  extracted_content), `files` (file_name), and in newer exports `parent_message_uuid`.
"""

from __future__ import annotations

import io
import uuid
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson

T0 = datetime(2023, 3, 14, 9, 26, 53, 589000, tzinfo=timezone.utc)


def iso(t: float) -> str:
    """Unix seconds as the ISO 8601 UTC a transcript holds (milliseconds, Z)."""
    dt = datetime.fromtimestamp(t, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def uid(seed: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, seed))


class ChatGPTConversation:
    """Build one conversation's tree: `add` a message under a parent (default: the last one added)."""

    def __init__(self, seed: str, title: str | None, create_time: float):
        self.id = uid(f"chatgpt/{seed}")
        self.title = title
        self.create_time = create_time
        self.update_time = create_time
        self.root = uid(f"chatgpt/{seed}/root")
        self.mapping: dict[str, Any] = {self.root: {"id": self.root, "message": None, "parent": None, "children": []}}
        self.last = self.root
        self.current: str | None = None
        self.n = 0
        # Real exports start with a hidden, empty system message under the root.
        self.system = self.add(
            "system",
            {"content_type": "text", "parts": [""]},
            time=None,
            metadata={"is_visually_hidden_from_conversation": True},
        )

    def add(
        self,
        role: str,
        content: dict[str, Any],
        *,
        parent: str | None = None,
        time: float | None | str = "next",
        recipient: str = "all",
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        self.n += 1
        node = uid(f"{self.id}/{self.n}")
        parent = parent or self.last
        when = self.update_time + 7.25 if time == "next" else time
        if isinstance(when, (int, float)):
            self.update_time = max(self.update_time, float(when))
        message = {
            "id": node,
            "author": {"role": role, "name": name, "metadata": {}},
            "create_time": when,
            "update_time": None,
            "content": content,
            "status": "finished_successfully",
            "end_turn": True if role == "assistant" else None,
            "weight": 1.0 if role != "system" else 0.0,
            "metadata": {"model_slug": "gpt-4o", "request_id": uid(node), "timestamp_": "absolute", **(metadata or {})},
            "recipient": recipient,
            "channel": None,
        }
        self.mapping[node] = {"id": node, "message": message, "parent": parent, "children": []}
        self.mapping[parent]["children"].append(node)
        self.last = node
        return node

    def text(self, role: str, text: str, **kw: Any) -> str:
        return self.add(role, {"content_type": "text", "parts": [text]}, **kw)

    def time_of(self, node: str) -> float:
        return self.mapping[node]["message"]["create_time"]

    def json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "create_time": self.create_time,
            "update_time": self.update_time,
            "mapping": self.mapping,
            "moderation_results": [],
            "current_node": self.current or self.last,
            "plugin_ids": None,
            "conversation_id": self.id,
            "conversation_template_id": None,
            "gizmo_id": None,
            "gizmo_type": None,
            "is_archived": False,
            "is_starred": None,
            "safe_urls": [],
            "blocked_urls": [],
            "default_model_slug": "gpt-4o",
            "conversation_origin": None,
            "voice": None,
            "async_status": None,
            "disabled_tool_ids": [],
            "is_do_not_remember": False,
            "memory_scope": "global_enabled",
            "sugar_item_id": None,
            "id": self.id,
        }


class ClaudeConversation:
    def __init__(self, seed: str, name: str, created: datetime, branched: bool = True):
        self.uuid = uid(f"claude/{seed}")
        self.name = name
        self.created = created
        self.updated = created
        self.messages: list[dict[str, Any]] = []
        self.branched = branched  # newer exports: every message names its parent
        self.n = 0

    def add(
        self,
        sender: str,
        text: str,
        *,
        blocks: list[dict[str, Any]] | None = None,
        attachments: list[dict[str, Any]] | None = None,
        files: list[str] | None = None,
        parent: str | None = None,
        at: datetime | None = None,
    ) -> str:
        self.n += 1
        mid = uid(f"{self.uuid}/{self.n}")
        when = at or self.updated + timedelta(seconds=11, microseconds=123456)
        self.updated = max(self.updated, when)
        stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        content = (
            blocks
            if blocks is not None
            else [
                {
                    "start_timestamp": stamp,
                    "stop_timestamp": stamp,
                    "type": "text",
                    "text": text,
                    "citations": [],
                }
            ]
        )
        msg: dict[str, Any] = {
            "uuid": mid,
            "text": text,
            "content": content,
            "sender": sender,
            "created_at": stamp,
            "updated_at": stamp,
            "attachments": attachments or [],
            "files": [{"file_name": f} for f in files or []],
        }
        if self.branched:
            prev = parent if parent is not None else (self.messages[-1]["uuid"] if self.messages else None)
            msg["parent_message_uuid"] = prev or "00000000-0000-4000-8000-000000000000"
        self.messages.append(msg)
        return mid

    def json(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "name": self.name,
            "summary": "",
            "created_at": self.created.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "updated_at": self.updated.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "account": {"uuid": uid("claude/account")},
            "chat_messages": self.messages,
        }


def chatgpt_zip(path: Path, conversations: list[dict[str, Any]], *, extra: bool = True) -> Path:
    """The export zip as ChatGPT sends it: conversations.json beside chat.html, user.json, …"""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("conversations.json", orjson.dumps(conversations))
        if extra:
            zf.writestr("chat.html", "<html><body>…</body></html>")
            zf.writestr("user.json", orjson.dumps({"id": "user-abc", "email": "me@example.com"}))
            zf.writestr("message_feedback.json", b"[]")
            zf.writestr("shared_conversations.json", b"[]")
            zf.writestr("file-AbC123-photo.jpg", b"\xff\xd8\xff\xe0 not really a jpeg")
    return path


def claude_zip(path: Path, conversations: list[dict[str, Any]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("conversations.json", orjson.dumps(conversations))
        zf.writestr("users.json", orjson.dumps([{"uuid": uid("claude/account"), "full_name": "Me"}]))
        zf.writestr("projects.json", b"[]")
    return path


# ---- the conversations the tests read line by line -----------------------------------------------------


def chatgpt_sample() -> tuple[list[dict[str, Any]], dict[str, list[tuple[str, str, str, str]]]]:
    """Three conversations covering what an export holds, and what each should import as: conversation id
    → [(message id, role, text, timestamp), …] in order."""
    expect: dict[str, list[tuple[str, str, str, str]]] = {}
    t = T0.timestamp()

    # 1. Branches: an edited question and a regenerated answer; non-ASCII; an empty reply.
    c = ChatGPTConversation("trip", "Voyage à Lisbonne 🇵🇹", t)
    q1 = c.text("user", "Où devrais-je loger à Lisbonne ? 住むならどこ？")
    a1 = c.text("assistant", "Alfama or Príncipe Real — both walkable.")
    old_q = c.text("user", "What about the boat to Cacilhas?", parent=a1)
    c.text("assistant", "It leaves every 20 minutes.", parent=old_q)
    new_q = c.text("user", "What about the ferry to Cacilhas from Cais do Sodré?", parent=a1)  # the edit
    c.text("assistant", "Every 15 minutes or so.", parent=new_q)
    new_a = c.text("assistant", "Every 10–20 minutes; the crossing takes 10 minutes. ⛴️", parent=new_q)  # regenerated
    empty = c.add("assistant", {"content_type": "text", "parts": [""]}, parent=new_a)
    last = c.text("user", "Merci ! My hotel is the Memmo Alfama, room 407.", parent=empty)
    c.current = last
    expect[c.id] = [
        (q1, "user", "Où devrais-je loger à Lisbonne ? 住むならどこ？", iso(c.time_of(q1))),
        (a1, "assistant", "Alfama or Príncipe Real — both walkable.", iso(c.time_of(a1))),
        (new_q, "user", "What about the ferry to Cacilhas from Cais do Sodré?", iso(c.time_of(new_q))),
        (new_a, "assistant", "Every 10–20 minutes; the crossing takes 10 minutes. ⛴️", iso(c.time_of(new_a))),
        (last, "user", "Merci ! My hotel is the Memmo Alfama, room 407.", iso(c.time_of(last))),
    ]
    trip = c.json()

    # 2. Images, code, tools, hidden and reasoning messages, custom instructions, a null create_time.
    c = ChatGPTConversation("code", "Plot my runs", t + 86400 * 40)
    c.add(
        "user",
        {"content_type": "user_editable_context", "user_profile": "I run.", "user_instructions": "Be brief."},
        metadata={"is_visually_hidden_from_conversation": True, "is_user_system_message": True},
    )
    img = c.add(
        "user",
        {
            "content_type": "multimodal_text",
            "parts": [
                {
                    "content_type": "image_asset_pointer",
                    "asset_pointer": "file-service://file-Runs2023",
                    "size_bytes": 48029,
                    "width": 1024,
                    "height": 768,
                    "fovea": None,
                    "metadata": {"dalle": None, "sanitized": True},
                },
                "Here is a screenshot of my running log. Plot distance per week.",
            ],
        },
    )
    c.add("assistant", {"content_type": "thoughts", "thoughts": [{"summary": "s", "content": "c"}]})
    c.add("assistant", {"content_type": "reasoning_recap", "content": "Thought for 4 seconds"})
    code = c.add(
        "assistant",
        {
            "content_type": "code",
            "language": "python",
            "text": "import pandas as pd\nweekly = df.resample('W').sum()\n",
        },
        recipient="python",
    )
    c.add(
        "tool",
        {"content_type": "execution_output", "text": "<Figure size 640x480>"},
        name="python",
    )
    c.add("assistant", {"content_type": "code", "language": "unknown", "text": 'search("pace")'}, recipient="browser")
    c.add("tool", {"content_type": "tether_browsing_display", "result": "", "summary": ""}, name="browser")
    answer = c.text(
        "assistant", "Your weekly distance peaked at **42 km** in week 23.\n\n```python\nweekly.plot()\n```", time=None
    )
    dalle = c.add(
        "tool",
        {
            "content_type": "multimodal_text",
            "parts": [
                {
                    "content_type": "image_asset_pointer",
                    "asset_pointer": "sediment://file_00000000abc",
                    "size_bytes": 1234,
                    "width": 1024,
                    "height": 1024,
                    "fovea": None,
                    "metadata": {"dalle": {"gen_id": "g1", "prompt": "a runner at dawn", "seed": 7}},
                }
            ],
        },
        name="dalle.text2im",
    )
    voice = c.add(
        "user",
        {
            "content_type": "multimodal_text",
            "parts": [
                {"content_type": "audio_transcription", "text": "Thanks, save the chart please.", "direction": "in"},
                {"content_type": "audio_asset_pointer", "asset_pointer": "sediment://file_audio", "size_bytes": 9},
            ],
        },
    )
    expect[c.id] = [
        (
            img,
            "user",
            "[image: file-service://file-Runs2023, 1024×768]\nHere is a screenshot of my running log. Plot distance per week.",
            iso(c.time_of(img)),
        ),
        (
            code,
            "assistant",
            "```python\nimport pandas as pd\nweekly = df.resample('W').sum()\n```",
            iso(c.time_of(code)),
        ),
        # No create_time of its own: the time of the message before it on the path (the browsing display's).
        (
            answer,
            "assistant",
            "Your weekly distance peaked at **42 km** in week 23.\n\n```python\nweekly.plot()\n```",
            iso(c.time_of(c.mapping[answer]["parent"])),
        ),
        (
            dalle,
            "assistant",
            "[image: sediment://file_00000000abc, 1024×1024, generated from: a runner at dawn]",
            iso(c.time_of(dalle)),
        ),
        (voice, "user", "Thanks, save the chart please.\n[audio]", iso(c.time_of(voice))),
    ]
    code_conv = c.json()

    # 3. A conversation with nothing to import (only the hidden system message).
    c = ChatGPTConversation("empty", None, t + 86400 * 41)
    expect[c.id] = []
    empty_conv = c.json()
    return [trip, code_conv, empty_conv], expect


def claude_sample() -> tuple[list[dict[str, Any]], dict[str, list[tuple[str, str, str, str]]]]:
    expect: dict[str, list[tuple[str, str, str, str]]] = {}
    c = ClaudeConversation("garden", "Planning the garden 🌱", T0 + timedelta(days=100))
    m1 = c.add(
        "human",
        "Here are my notes. Which tomatoes suit a north-facing balcony?",
        attachments=[
            {
                "file_name": "notes.txt",
                "file_size": 42,
                "file_type": "text/plain",
                "extracted_content": "Balcony faces north; 3 hours of sun. Über-sweet cherries wanted.",
            }
        ],
        files=["balcony.jpg"],
    )
    stamp = c.messages[-1]["created_at"]
    m2 = c.add(
        "assistant",
        "Try 'Tumbling Tom'.",
        blocks=[
            {"type": "thinking", "thinking": "north facing → shade tolerant", "start_timestamp": stamp},
            {"type": "text", "text": "Try 'Tumbling Tom' or 'Sungold' — both tolerate ", "citations": []},
            {"type": "tool_use", "name": "web_search", "input": {"query": "shade tomatoes"}},
            {"type": "tool_result", "name": "web_search", "content": [{"type": "text", "text": "…"}]},
            {"type": "text", "text": "partial shade.", "citations": []},
        ],
    )
    old = c.add("human", "And cucumbers?", parent=m2)
    c.add("assistant", "Cucumbers need more sun.", parent=old)
    edited = c.add("human", "And basil, 日本語でも教えて？", parent=m2)
    empty = c.add("assistant", "", blocks=[], parent=edited)
    m5 = c.add("human", "Thanks! I planted the Sungold on 2 May.", parent=empty)

    def when(mid: str) -> str:
        raw = next(m["created_at"] for m in c.messages if m["uuid"] == mid)
        dt = datetime.strptime(raw, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
        return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"

    expect[c.uuid] = [
        (
            m1,
            "user",
            "Here are my notes. Which tomatoes suit a north-facing balcony?\n\n[attachment: notes.txt]\n"
            "Balcony faces north; 3 hours of sun. Über-sweet cherries wanted.\n\n[file: balcony.jpg]",
            when(m1),
        ),
        (m2, "assistant", "Try 'Tumbling Tom' or 'Sungold' — both tolerate \n\npartial shade.", when(m2)),
        (edited, "user", "And basil, 日本語でも教えて？", when(edited)),
        (m5, "user", "Thanks! I planted the Sungold on 2 May.", when(m5)),
    ]
    garden = c.json()

    c = ClaudeConversation("old", "An older export", T0 + timedelta(days=120), branched=False)
    a = c.add("human", "What is the capital of Australia?")
    b = c.add("assistant", "Canberra.")
    expect[c.uuid] = [
        (a, "user", "What is the capital of Australia?", when_of(c, a)),
        (b, "assistant", "Canberra.", when_of(c, b)),
    ]
    return [garden, c.json()], expect


def when_of(c: ClaudeConversation, mid: str) -> str:
    raw = next(m["created_at"] for m in c.messages if m["uuid"] == mid)
    dt = datetime.strptime(raw, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def long_chatgpt(seed: str, turns: int, start: float | None = None) -> ChatGPTConversation:
    """One conversation of `turns` messages, alternating user and assistant."""
    c = ChatGPTConversation(seed, f"Long conversation {seed}", start or T0.timestamp())
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        c.text(role, f"Turn {i} of {seed}: " + ("question about item %d?" % i if role == "user" else "answer %d." % i))
    return c


def generated_export(n: int, turns: int = 12, seed: str = "gen") -> bytes:
    """conversations.json of `n` generated conversations (the benchmark's), as bytes."""
    words = "garden boat ferry tomato lisbon basil runner chart kettle violin harbour lantern".split()
    convs = []
    for i in range(n):
        c = ChatGPTConversation(f"{seed}/{i}", f"Conversation {i}: {words[i % len(words)]}", T0.timestamp() + i * 3600)
        for j in range(turns):
            role = "user" if j % 2 == 0 else "assistant"
            w = words[(i + j) % len(words)]
            text = (
                f"In conversation {i}, turn {j}, we talked about the {w} and the {words[(i * 7 + j) % len(words)]}. "
                * 3
            )
            c.text(role, text)
        convs.append(c.json())
    return orjson.dumps(convs)


def zip_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()
