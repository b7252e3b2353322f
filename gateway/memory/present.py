"""The one presenter of a memory hit: how a hit reads to whoever reads it. Each consumer has its
function here, and nothing else shapes a hit:

    shape(hit)             what every reader is shown of a found hit (memory/hit.py's Hit): a keyed
                           memory's value in place of its file's text
    wire(hit), answer(found)   the wire (memory.search: WebSocket, MCP, the web page, `jarvis … --json`):
                           the one place a Hit becomes its camelCase keys (memory/hit.py's WireHit)
    heading(hit)           its citation line, the same for every reader of text:
                               2025-11-08 · session "Moving" · sessions/3f….jsonl:2-4 · said 3 times, last 2025-12-03
                               2025-04-12 · sessions/9a….jsonl:2-5 · superseded by 2025-11-08
    prompt_section(hits)   recalled memory in a model's system prompt (chat runs, /v1 requests)
    tool_line(i, hit)      one hit in a memory tool's result (the chat model, MCP)
    offline_line(hit)      one hit in the offline responder's answer
    cli_lines(hit)         one hit of `jarvis memory search`
    reference(hit)         where it is and when, in chat.final's and a tool's `memory` list
    span(path, first, last)  where a passage read whole is (memory.get's lines, a keyed memory, a fact's
                           evidence), in a tool's `memory` list
    label_sessions(hits, label_of)   each transcript hit's `session` (its conversation's label), looked up
    references(hits)       where they are, compact (/v1's X-Jarvis-Memory and `jarvis` field)

The readers below read a hit as the wire has it: a `memory.search` result (`path`, `startLine`, `endLine`, `score`, `snippet`, `date`, and where
the search found them `said`, `lastSaid`, `supersededBy`, see search/timeline.py), a `memory.recall` one
(`timestamp` for its date, `key`), plus `session`: the label of its conversation when the caller looked
it up.
"""

from __future__ import annotations

import contextlib
from typing import Any, Awaitable, Callable, Mapping, Sequence

from ..neterrors import short
from .hit import Found, Hit, SearchAnswer, WireHit
from .notes.keyed import snippet_value

TOOL_SNIPPET_CHARS = 400  # of each hit in a tool's result
OFFLINE_SNIPPET_CHARS = 240
SESSION_LABEL_CHARS = 60


def day(iso: object) -> str:
    """The day of an ISO 8601 timestamp ("2025-11-08"), "" for anything else."""
    return iso[:10] if isinstance(iso, str) and len(iso) >= 10 else ""


def when(hit: Mapping[str, Any]) -> Any:
    """When a hit was said or written: `date` (memory.search), else `timestamp` (memory.recall)."""
    return hit.get("date") or hit.get("timestamp")


def shape(hit: Hit) -> Hit:
    """A hit as every reader is shown it: a keyed memory shows its value, not its front matter."""
    shown = snippet_value(hit.path, hit.snippet)
    return hit if shown == hit.snippet else hit._replace(snippet=shown)


def wire(hit: Hit) -> WireHit:
    """A hit as the wire names it (memory.search's `results`), its fields in this order, each optional one
    only when the search found it."""
    out: WireHit = {
        "path": hit.path,
        "source": hit.source,
        "startLine": hit.start_line,
        "endLine": hit.end_line,
        "score": hit.score,
        "snippet": hit.snippet,
    }
    if hit.session_key:
        out["sessionKey"] = hit.session_key
    if hit.date:
        out["date"] = hit.date
    if hit.said is not None:
        out["said"] = hit.said
    if hit.first_said is not None:
        out["firstSaid"] = hit.first_said
    if hit.last_said is not None:
        out["lastSaid"] = hit.last_said
    if hit.superseded_by is not None:
        out["supersededBy"] = hit.superseded_by
    if (f := hit.fact) is not None:
        out["fact"] = {"subject": f.subject, "value": f.value, "since": f.since}
        if f.until:
            out["fact"]["until"] = f.until
    return out


def answer(found: Found, as_of: str | None = None) -> SearchAnswer:
    """memory.search's answer: its hits on the wire, the mode, the embeddings, why it is degraded, `asOf`."""
    out: SearchAnswer = {"results": [wire(h) for h in found.hits], "mode": found.mode, "embeddings": found.embeddings}
    if found.degraded:
        out["degraded"] = found.degraded
    if as_of:
        out["asOf"] = as_of
    return out


def heading(hit: Mapping[str, Any]) -> str:
    """The hit's citation line (without brackets)."""
    parts = []
    if said_on := day(when(hit)):
        parts.append(said_on)
    if label := hit.get("session"):
        parts.append(f'session "{label}"')
    parts.append(f"{hit['path']}:{hit['startLine']}-{hit['endLine']}")
    said = hit.get("said")
    if isinstance(said, int) and said > 1:
        parts.append(f"said {said} times, last {day(hit.get('lastSaid'))}")
    if newer := day(hit.get("supersededBy")):
        parts.append(f"superseded by {newer}")
    return " · ".join(parts)


def _one_line(hit: Mapping[str, Any], limit: int) -> str:
    return short(" ".join(str(hit.get("snippet", "")).split()), limit)


def prompt_section(hits: Sequence[Mapping[str, Any]]) -> str:
    """The recalled memory as it is added to a system prompt, each snippet under its citation. Newer
    statements come first where hits disagree, and an older one says what superseded it."""
    if not hits:
        return ""
    facts = [fact_line(r) for r in hits if r.get("fact")]
    head = "\n\n## What is true now\n" + "\n".join(facts) if facts else ""
    return head + "\n\n## Recalled memory\n" + "\n\n".join(f"[{heading(r)}]\n{r['snippet']}" for r in hits)


def fact_line(hit: Mapping[str, Any]) -> str:
    """A hit the ledger chose (memory/ledger/recall.py) as one dated line: `- home: Dundee (since 2025-09-01;
    sessions/….jsonl:4-4)`, or what held then when the question asked about an earlier time."""
    f = hit["fact"]
    value = f.get("value") or "(ended)"
    span = f"{day(f.get('since'))}" + (f" until {day(f['until'])}" if f.get("until") else "")
    return f"- {f['subject']}: {value} ({'from ' if f.get('until') else 'since '}{span}; {hit['path']}:{hit['startLine']}-{hit['endLine']})"


def tool_line(i: int, hit: Mapping[str, Any]) -> str:
    """One hit of a memory tool's result: its number and citation (with its key and score), then what
    it says on one line."""
    about = [f"key {hit['key']}"] if hit.get("key") else []
    if hit.get("score") is not None:
        about.append(f"score {hit['score']:.2f}")
    tail = f" ({'; '.join(about)})" if about else ""
    return f"[{i}] {heading(hit)}{tail}\n    {_one_line(hit, TOOL_SNIPPET_CHARS)}"


def offline_line(hit: Mapping[str, Any]) -> str:
    """One hit in the offline responder's answer."""
    return f"- {heading(hit)} (score {hit['score']:.2f}): {_one_line(hit, OFFLINE_SNIPPET_CHARS)}"


def cli_lines(hit: Mapping[str, Any]) -> list[str]:
    """One hit of `jarvis memory search`: score, date and place (a single line as `path:7`), then what
    it says, indented."""
    span = f"{hit['startLine']}" + (f"–{hit['endLine']}" if hit["endLine"] != hit["startLine"] else "")
    place = f"{hit['path']}:{span}"
    said_on = day(when(hit))
    head = f"{hit['score']:.3f}  " + (f"{said_on} · {place}" if said_on else place)
    return [head] + [f"    {line}" for line in str(hit.get("snippet", "")).splitlines()]


def span(path: str, first: int, last: int) -> dict[str, Any]:
    """Where a passage is: its file and lines (a tool outcome's `memory`; a hit's reference starts so)."""
    return {"path": path, "startLine": first, "endLine": last}


def reference(hit: Mapping[str, Any]) -> dict[str, Any]:
    """Where a hit is and when (chat.final's `memory`, kept with the reply; a tool outcome's)."""
    out = span(hit["path"], hit["startLine"], hit["endLine"])
    if hit.get("score") is not None:
        out["score"] = hit["score"]
    if said_on := when(hit):
        out["date"] = said_on
    if hit.get("supersededBy"):
        out["supersededBy"] = hit["supersededBy"]
    return out


def references(hits: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Where each hit is, compact: path, lines and score (/v1's X-Jarvis-Memory and `jarvis` field)."""
    return [
        {"path": r["path"], "startLine": r["startLine"], "endLine": r["endLine"], "score": round(float(r["score"]), 4)}
        for r in hits
    ]


async def label_sessions(hits: list[dict[str, Any]], label_of: Callable[[str], Awaitable[str | None]]) -> None:
    """Give each transcript hit its conversation's label (`session`, for `heading`), each session looked
    up once; a session deleted meanwhile, or without a label, is cited by its path alone."""
    labels: dict[str, str] = {}
    for key in dict.fromkeys(r["sessionKey"] for r in hits if r.get("sessionKey")):
        with contextlib.suppress(Exception):  # deleted meanwhile: the citation keeps its path
            labels[key] = short(await label_of(key) or "", SESSION_LABEL_CHARS)
    for r in hits:
        if labels.get(r.get("sessionKey") or ""):
            r["session"] = labels[r["sessionKey"]]
