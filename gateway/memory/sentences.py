"""What a hit's text says, sentence by sentence: the helpers that the timeline (search/timeline.py) and
the ledger's placement (ledger/placement.py) both read a snippet with, kept here so that neither calls
into the other.
"""

from __future__ import annotations

import re

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
# A speaker's label opening a line ("User: ", "Caroline: "), left out of its sentences.
_LABEL = re.compile(r"^\s*(?:[A-Z][\w .'’-]{0,30}):\s+")
# A transcript's speaker anywhere in a snippet ("… User: …"): whose words follow.
_SPEAKER = re.compile(r"(?:^|\s)(User|Assistant):\s", re.I)


def norm(text: str) -> str:
    """Lowercased, each run of white space one space: how texts are compared for containment."""
    return " ".join(text.lower().split())


def sentences(snippet: str) -> list[str]:
    """The snippet's sentences, without the speaker labels ("User: …") and the "…" of a cut."""
    out: list[str] = []
    for line in snippet.split("\n"):
        if ":" in line:  # (a label ends in one: no substitution to try on the other lines)
            line = _LABEL.sub("", line)
        for s in _SENTENCE.findall(line.strip(" …")):
            s = s.strip()
            if len(s) > 1:
                out.append(s)
    return out


def statements(said: list[str]) -> list[str]:
    """Of a text's sentences (`sentences`), those that state (not ask)."""
    return [s for s in said if not s.endswith("?")]


def own_words(snippet: str) -> list[str]:
    """The person's own words in a snippet: its `User:` parts, or all of it when no speaker is named."""
    parts = _SPEAKER.split(snippet)
    if len(parts) == 1:
        return [snippet]
    return [parts[i + 1] for i in range(1, len(parts) - 1, 2) if parts[i].lower() == "user"]
