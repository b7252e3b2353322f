"""Files of the memory features that write into an agent's workspace (keyed memories, LEARNINGS.md,
images): front matter and one-line previews here; durable writes and locks come from gateway.fsutil.

    parse_front_matter(text)        ({"key": "…", …}, body) for a leading `---` … `---` block
"""

from __future__ import annotations

import re

_FM = re.compile(r"\A---[ \t]*\n(.*?)\n---[ \t]*(?:\n|\Z)", re.S)


def parse_front_matter(text: str) -> tuple[dict[str, str], str]:
    """`key: value` lines of a leading `---` block, and the text after it."""
    m = _FM.match(text)
    if not m:
        return {}, text
    meta: dict[str, str] = {}
    for line in m.group(1).splitlines():
        k, sep, v = line.partition(":")
        if sep and k.strip():
            meta[k.strip()] = v.strip()
    return meta, text[m.end() :]


def front_matter(meta: dict[str, str]) -> str:
    return "---\n" + "".join(f"{k}: {v}\n" for k, v in meta.items()) + "---\n"


def one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
