"""`memory.get`'s lines of a memory file or transcript (sources.resolve_readable finds the file)."""

from __future__ import annotations

from pathlib import Path

MAX_GET_CHARS = 256 * 1024


def read_lines(target: Path, start: int, count: int) -> tuple[list[str], bool]:
    """Lines start..start+count-1 (1-based) of a file, at most MAX_GET_CHARS in all (blocking).
    Returns (lines, more) where `more` says lines remain after those returned."""
    out: list[str] = []
    total = 0
    # Lines end at "\n" only, as the chunker counts them (a lone "\r" inside a line is the line's own):
    # the lines a search hit cites are the lines read here.
    with open(target, "rb") as fh:
        for no, raw in enumerate(fh, start=1):
            if no < start:
                continue
            if len(out) >= count:
                return out, True
            line = raw.decode("utf-8", errors="replace").rstrip("\n").rstrip("\r")
            if total + len(line) > MAX_GET_CHARS:
                if not out:  # one giant line: cut it, continue on the next line
                    out.append(line[:MAX_GET_CHARS])
                return out, True
            out.append(line)
            total += len(line) + 1
    return out, False
