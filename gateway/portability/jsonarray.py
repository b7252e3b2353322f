"""The elements of one big JSON array, one at a time, from a stream: how a vendor's `conversations.json`
(a single array of every conversation, hundreds of MB) is read in bounded memory.

    for element in elements(stream, max_element=64 << 20):
        obj = orjson.loads(element.data)        # one conversation at a time

The scanner finds where each top-level element ends without decoding it: a regular expression skips
everything that is neither a bracket nor a string (and whole strings, escapes included) in C; Python sees
only the brackets, counting depth. The buffer holds the element being read and at most one chunk more, so
memory is bounded by the largest element (`max_element`), never by the file. Everything here blocks: run
it in a thread.

A stream that is not one array, an element that is not an object, an element over `max_element`, and a
stream that ends inside an element raise `Malformed` with the element's index (0-based) and byte offset;
every element before it has been yielded whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterator

CHUNK = 1 << 20

# Inside an element: any run of bytes that are not brackets or quotes, and whole strings (escapes included).
_SKIP = re.compile(rb'(?:[^"\[\]{}]+|"[^"\\]*(?:\\.[^"\\]*)*")*', re.S)
_SPACE = re.compile(rb"[ \t\r\n]*")
_OPEN, _CLOSE = frozenset(b"[{"), frozenset(b"]}")


class Malformed(Exception):
    """The stream is not an array of objects, or ends inside one. `index`: the element at fault (None
    when it is the array itself); `offset`: the byte where it starts (or where the fault was found)."""

    def __init__(self, message: str, index: int | None = None, offset: int = 0):
        super().__init__(message)
        self.message = message
        self.index = index
        self.offset = offset


@dataclass(frozen=True)
class Element:
    index: int  # 0-based position in the array
    offset: int  # its first byte in the stream
    data: bytes  # its JSON text


class _Reader:
    """A growing window over the stream: `buf[0]` is byte `base` of the stream."""

    def __init__(self, stream: BinaryIO, on_read: Callable[[int], None] | None, chunk: int = CHUNK):
        self.stream = stream
        self.chunk = chunk
        self.on_read = on_read
        self.buf = bytearray()
        self.base = 0
        self.eof = False

    def more(self, at_least: int = 1) -> bool:
        """Read chunks until `at_least` more bytes are in (or the stream ends); False when nothing more came."""
        got = 0
        while got < at_least and not self.eof:
            chunk = self.stream.read(max(self.chunk, at_least - got))
            if not chunk:
                self.eof = True
                break
            self.buf += chunk
            got += len(chunk)
            if self.on_read is not None:
                self.on_read(len(chunk))
        return got > 0

    def drop(self, upto: int) -> int:
        """Forget the bytes before buffer position `upto` (they were yielded); → the new position of `upto`."""
        if upto > self.chunk:
            del self.buf[:upto]
            self.base += upto
            return 0
        return upto

    def skip_space(self, pos: int) -> int:
        """The position of the next non-space byte (reading more as needed); len(buf) at the end."""
        while True:
            pos = _SPACE.match(self.buf, pos).end()  # type: ignore[union-attr]  # matches the empty string
            if pos < len(self.buf) or not self.more():
                return pos


def elements(
    stream: BinaryIO, *, max_element: int, on_read: Callable[[int], None] | None = None, chunk: int = CHUNK
) -> Iterator[Element]:
    """Each element of the JSON array `stream` holds, in order (see the module docstring). `on_read(n)`
    is told of every chunk read (progress); `chunk`: bytes read at a time."""
    r = _Reader(stream, on_read, chunk)
    pos = r.skip_space(0)
    if pos >= len(r.buf):
        raise Malformed("the file is empty: expected a JSON array of conversations")
    if r.buf[pos] != ord("["):
        raise Malformed(
            f"expected a JSON array of conversations, found {_shown(r.buf, pos)} at byte {r.base + pos}",
            offset=r.base + pos,
        )
    pos += 1
    index = 0
    while True:
        pos = r.skip_space(pos)
        if pos >= len(r.buf):
            raise Malformed(
                f"the file ends after {index} conversations, before the array is closed (truncated?)",
                index,
                r.base + pos,
            )
        if r.buf[pos] == ord("]"):
            break
        if index:
            if r.buf[pos] != ord(","):
                raise Malformed(
                    f"expected ',' or ']' after conversation {index - 1}, found {_shown(r.buf, pos)}",
                    index,
                    r.base + pos,
                )
            pos = r.skip_space(pos + 1)
            if pos >= len(r.buf):
                raise Malformed(
                    f"the file ends after {index} conversations, before the array is closed (truncated?)",
                    index,
                    r.base + pos,
                )
        start = pos
        if r.buf[start] != ord("{"):
            raise Malformed(
                f"conversation {index} is not a JSON object (found {_shown(r.buf, start)})", index, r.base + start
            )
        pos, depth = start + 1, 1
        while depth:
            pos = _SKIP.match(r.buf, pos).end()  # type: ignore[union-attr]  # matches the empty string
            if pos >= len(r.buf) or r.buf[pos] == ord('"'):  # the chunk ends here, or inside a string
                if pos - start > max_element:
                    raise Malformed(
                        f"conversation {index} is larger than {max_element} bytes, the most one conversation may be",
                        index,
                        r.base + start,
                    )
                # A string is scanned again from its quote once more is read: read as much again as it
                # has so far, so a string of many chunks costs a few scans, not one per chunk.
                if not r.more(max(1, len(r.buf) - pos)):
                    raise Malformed(
                        f"the file ends inside conversation {index} (truncated after {r.base + len(r.buf)} bytes)",
                        index,
                        r.base + start,
                    )
                continue
            c = r.buf[pos]
            if c in _OPEN:
                depth += 1
            elif c in _CLOSE:
                depth -= 1
            pos += 1
        if pos - start > max_element:
            raise Malformed(
                f"conversation {index} is larger than {max_element} bytes, the most one conversation may be",
                index,
                r.base + start,
            )
        yield Element(index, r.base + start, bytes(r.buf[start:pos]))
        index += 1
        pos = r.drop(pos)
    rest = r.skip_space(pos + 1)
    if rest < len(r.buf):
        raise Malformed(
            f"unexpected {_shown(r.buf, rest)} after the array's end (byte {r.base + rest})", None, r.base + rest
        )


def _shown(buf: bytearray, pos: int) -> str:
    return repr(bytes(buf[pos : pos + 12]).decode("utf-8", "replace"))
