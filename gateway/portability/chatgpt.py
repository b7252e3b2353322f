"""ChatGPT's data export (`conversations.json`, alone or in the export's zip): one conversation's JSON →
a Conversation (conversation.py).

A conversation's messages are a tree, `mapping` (node id → {message, parent, children}): an edited
question or a regenerated answer starts a branch. The conversation the person saw last is the path from
the root to `current_node`; that path is imported, and the messages on other branches are counted as
left out. Along it:

- `user` and `assistant` messages are kept with their `create_time` (Unix seconds; a message without one
  takes the time of the one before it, or the conversation's `create_time`);
- text parts are joined; images become `[image: <asset pointer>, W×H]` (a generated one also names its
  prompt), audio `[audio]` with its transcription when there is one; the Code Interpreter's code is kept
  as a fenced block (`recipient: python`);
- left out, counted by why: system messages (the hidden prompt, custom instructions), tool messages
  (browsing results, code output; a tool message that shows images, as DALL·E's do, is kept as the
  assistant's), calls to other tools, messages marked hidden, reasoning (`thoughts`,
  `reasoning_recap`), content types with no text, and messages that are empty.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .conversation import Conversation, Fields, Turn, dict_or_empty, message_id

SOURCE = "chatgpt"
_HIDDEN_TYPES = {
    "thoughts": "model reasoning",
    "reasoning_recap": "model reasoning",
    "user_editable_context": "custom instructions",
    "model_editable_context": "ChatGPT's memory of you",
    "tether_browsing_display": "tool message",
    "tether_quote": "tool message",
    "system_error": "tool error",
    "execution_output": "tool message",
    "sonic_webpage": "tool message",
}


def convert(obj: Any, index: int, where: str = "conversations.json") -> Conversation:
    """One conversation of the export. Raises BadExport naming the conversation and the field."""
    ref: dict[str, Any] = {"index": index}
    f = Fields(where, ref)
    conv = f.obj(obj, "")
    assert conv is not None
    if "mapping" not in conv and "chat_messages" in conv:
        raise f.fail("mapping", "missing: this looks like a Claude export (it has chat_messages); import it as claude")
    cid = conv.get("conversation_id") or conv.get("id")
    ref["id"] = f.text(cid, "id")
    title = f.text(conv.get("title"), "title", null=True)
    ref["title"] = title
    mapping = f.obj(conv.get("mapping"), "mapping")
    assert mapping is not None
    created = f.epoch(conv.get("create_time"), "create_time")
    skipped: Counter[str] = Counter()

    path = _path(f, mapping, conv.get("current_node"))
    on_path = set(path)
    for node_id, node in mapping.items():
        if node_id not in on_path and isinstance(node, dict) and isinstance(node.get("message"), dict):
            skipped["on another branch (an edit or a regenerated answer)"] += 1

    turns: list[Turn] = []
    last = created
    for node_id in path:
        at = f"mapping.{node_id}.message"
        msg = f.obj(mapping[node_id].get("message"), at, null=True)
        if msg is None:
            continue
        when = f.epoch(msg.get("create_time"), f"{at}.create_time") or last
        last = when or last
        role, text, why = _render(f, msg, at)
        if why:
            skipped[why] += 1
            continue
        if not text.strip():
            skipped["empty"] += 1
            continue
        mid = message_id(msg.get("id") if isinstance(msg.get("id"), str) else node_id, f"{ref['id']}\x1f{node_id}")
        turns.append(Turn(mid, role, text, when or ""))
    first = next((t.timestamp for t in turns if t.timestamp), None)
    created = created or first or ""
    for t in turns:  # a conversation with no times at all: every turn takes the earliest one known
        t.timestamp = t.timestamp or created
    if not created:
        raise f.fail("create_time", "no time anywhere in the conversation (create_time and every message's are null)")
    return Conversation(SOURCE, index, ref["id"], title, created, turns, skipped)


def _path(f: Fields, mapping: dict[str, Any], current: Any) -> list[str]:
    """Node ids from the root to `current_node`, oldest first."""
    if current is None:
        return []
    current = f.text(current, "current_node")
    if current not in mapping:
        raise f.fail("current_node", f"{current[:80]!r} is not a node of mapping")
    path: list[str] = []
    seen: set[str] = set()
    node_id: str | None = current
    while node_id is not None:
        if node_id in seen:
            raise f.fail(f"mapping.{node_id}.parent", "the parents form a loop")
        seen.add(node_id)
        node = f.obj(mapping.get(node_id), f"mapping.{node_id}")
        assert node is not None
        path.append(node_id)
        parent = f.text(node.get("parent"), f"mapping.{node_id}.parent", null=True)
        if parent is not None and parent not in mapping:
            raise f.fail(f"mapping.{node_id}.parent", f"{parent[:80]!r} is not a node of mapping")
        node_id = parent
    path.reverse()
    return path


def _render(f: Fields, msg: dict[str, Any], at: str) -> tuple[str, str, str]:
    """(role, text, why it is left out — "" when kept)."""
    author = f.obj(msg.get("author"), f"{at}.author")
    assert author is not None
    role = f.text(author.get("role"), f"{at}.author.role")
    content = f.obj(msg.get("content"), f"{at}.content")
    assert content is not None and role is not None
    ctype = f.text(content.get("content_type"), f"{at}.content.content_type")
    assert ctype is not None
    meta = dict_or_empty(msg.get("metadata"))
    recipient = msg.get("recipient")
    if role == "system":
        return role, "", "system message"
    if meta.get("is_visually_hidden_from_conversation"):
        return role, "", "hidden"
    if ctype in _HIDDEN_TYPES:
        return role, "", _HIDDEN_TYPES[ctype]
    if role == "tool":
        if ctype == "multimodal_text":  # an image a tool made (DALL·E): the person saw it as the reply
            text = _parts(f, content, at)
            return "assistant", text, "" if "[image" in text else "tool message"
        return role, "", "tool message"
    if role not in ("user", "assistant"):
        return role, "", f"author role {role[:40]!r}"
    if ctype == "code":
        if recipient not in (None, "all", "python"):
            return role, "", "a call to a tool"
        code = f.text(content.get("text"), f"{at}.content.text", null=True) or ""
        lang = content.get("language") if isinstance(content.get("language"), str) else ""
        lang = "" if lang in ("unknown", "") else lang
        return role, f"```{lang}\n{code.rstrip()}\n```" if code.strip() else "", ""
    if recipient not in (None, "all"):
        return role, "", "a call to a tool"
    if ctype in ("text", "multimodal_text") or "parts" in content:
        return role, _parts(f, content, at), ""
    if isinstance(content.get("text"), str):  # another kind that carries plain text
        return role, content["text"], ""
    return role, "", f"content type {ctype[:40]!r} (no text)"


def _parts(f: Fields, content: dict[str, Any], at: str) -> str:
    parts = f.arr(content.get("parts"), f"{at}.content.parts", null=True) or []
    out: list[str] = []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict):
            shown = _part(part)
            if shown:
                out.append(shown)
        elif part is not None:
            raise f.fail(f"{at}.content.parts[{i}]", "must be a string or an object")
    return "\n".join(p for p in out if p)


def _part(part: dict[str, Any]) -> str:
    """A non-text part as text: an image or audio reference, a transcription."""
    kind = part.get("content_type")
    if kind == "image_asset_pointer":
        bits = [str(part.get("asset_pointer") or "no pointer")]
        if isinstance(part.get("width"), int) and isinstance(part.get("height"), int):
            bits.append(f"{part['width']}×{part['height']}")
        dalle = dict_or_empty(dict_or_empty(part.get("metadata")).get("dalle"))
        if isinstance(dalle.get("prompt"), str) and dalle["prompt"].strip():
            bits.append(f"generated from: {dalle['prompt'].strip()}")
        return f"[image: {', '.join(bits)}]"
    if kind == "audio_transcription":
        return part["text"] if isinstance(part.get("text"), str) else ""
    if isinstance(kind, str) and "audio" in kind:
        return "[audio]"
    if isinstance(kind, str) and "video" in kind:
        return "[video]"
    if isinstance(part.get("text"), str):
        return part["text"]
    return f"[{kind}]" if isinstance(kind, str) else ""
