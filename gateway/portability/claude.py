"""Claude's data export (`conversations.json`, alone or in the export's zip): one conversation's JSON → a
Conversation (conversation.py).

A conversation is `chat_messages` in order, each with its `uuid`, `sender` (`human` or `assistant`),
`created_at` and text. The text is the message's `content` blocks of type `text` (a message without
blocks: its `text`); `thinking`, `tool_use` and `tool_result` blocks are left out; an image block becomes
`[image]`. Attachments are kept as `[attachment: NAME]` followed by the text Claude extracted from them (a
long paste becomes one), files as `[file: NAME]`.

Newer exports give each message its `parent_message_uuid`: where a message was edited or an answer
retried, the messages form a tree, and the branch imported is the one that ends with the last message
(the one the person saw last); the others are counted as left out.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .conversation import Conversation, Fields, Turn, message_id

SOURCE = "claude"
ROLES = {"human": "user", "user": "user", "assistant": "assistant"}


def convert(obj: Any, index: int, where: str = "conversations.json") -> Conversation:
    """One conversation of the export. Raises BadExport naming the conversation and the field."""
    ref: dict[str, Any] = {"index": index}
    f = Fields(where, ref)
    conv = f.obj(obj, "")
    assert conv is not None
    if "chat_messages" not in conv and "mapping" in conv:  # before any field a ChatGPT conversation lacks
        raise f.fail(
            "chat_messages", "missing: this looks like a ChatGPT export (it has mapping); import it as chatgpt"
        )
    ref["id"] = f.text(conv.get("uuid"), "uuid")
    title = f.text(conv.get("name"), "name", null=True)
    ref["title"] = title or None
    messages = f.arr(conv.get("chat_messages"), "chat_messages")
    assert messages is not None
    created = f.iso(conv.get("created_at"), "created_at", null=True)
    skipped: Counter[str] = Counter()

    chosen = _branch(f, messages)
    skipped["on another branch (an edit or a retried answer)"] += len(messages) - len(chosen)
    turns: list[Turn] = []
    last = created
    for i in chosen:
        at = f"chat_messages[{i}]"
        msg = f.obj(messages[i], at)
        assert msg is not None
        sender = f.text(msg.get("sender"), f"{at}.sender")
        assert sender is not None
        when = f.iso(msg.get("created_at"), f"{at}.created_at", null=True) or last
        last = when
        role = ROLES.get(sender)
        if role is None:
            skipped[f"sender {sender[:40]!r}"] += 1
            continue
        text = _text(f, msg, at)
        if not text.strip():
            skipped["empty"] += 1
            continue
        mid = message_id(msg.get("uuid"), f"{ref['id']}\x1f{i}\x1f{when}\x1f{text}")
        turns.append(Turn(mid, role, text, when or ""))
    created = created or next((t.timestamp for t in turns if t.timestamp), None)
    if not created:
        raise f.fail("created_at", "no time anywhere in the conversation (created_at and every message's are null)")
    for t in turns:
        t.timestamp = t.timestamp or created
    skipped = +skipped  # drop zero counts
    return Conversation(SOURCE, index, ref["id"], ref["title"], created, turns, skipped)


def _branch(f: Fields, messages: list[Any]) -> list[int]:
    """Indexes of the messages of the branch that ends with the last one, in order; every message when
    they carry no parent ids (older exports: one line of messages)."""
    ids: dict[str, int] = {}
    parents: dict[int, str] = {}
    for n, m in enumerate(messages):
        if isinstance(m, dict):
            if isinstance(m.get("uuid"), str):
                ids[m["uuid"]] = n
            if isinstance(m.get("parent_message_uuid"), str):
                parents[n] = m["parent_message_uuid"]
    if not parents or not messages:
        return list(range(len(messages)))
    chain: list[int] = []
    seen: set[int] = set()
    i: int | None = len(messages) - 1
    while i is not None:
        if i in seen:
            raise f.fail(f"chat_messages[{i}].parent_message_uuid", "the parents form a loop")
        seen.add(i)
        chain.append(i)
        parent = parents.get(i)
        i = ids.get(parent) if parent is not None else None
    chain.reverse()
    return chain


def _text(f: Fields, msg: dict[str, Any], at: str) -> str:
    blocks = f.arr(msg.get("content"), f"{at}.content", null=True) or []
    out: list[str] = []
    saw_text = False
    for j, block in enumerate(blocks):
        b = f.obj(block, f"{at}.content[{j}]")
        assert b is not None
        kind = b.get("type")
        if kind == "text":
            saw_text = True
            piece = f.text(b.get("text"), f"{at}.content[{j}].text", null=True)
            if piece:
                out.append(piece)
        elif kind == "image":
            out.append("[image]")
    if not saw_text:
        plain = f.text(msg.get("text"), f"{at}.text", null=True)
        if plain:
            out.insert(0, plain)
    for k, att in enumerate(f.arr(msg.get("attachments"), f"{at}.attachments", null=True) or []):
        a = f.obj(att, f"{at}.attachments[{k}]")
        assert a is not None
        name = a.get("file_name") if isinstance(a.get("file_name"), str) else "attachment"
        body = f.text(a.get("extracted_content"), f"{at}.attachments[{k}].extracted_content", null=True)
        out.append(f"[attachment: {name}]" + (f"\n{body.strip()}" if body and body.strip() else ""))
    for k, fl in enumerate(f.arr(msg.get("files"), f"{at}.files", null=True) or []):
        entry = f.obj(fl, f"{at}.files[{k}]")
        assert entry is not None
        name = entry.get("file_name") if isinstance(entry.get("file_name"), str) else "file"
        out.append(f"[file: {name}]")
    return "\n\n".join(out)
