"""What `jarvis import` says of a file, by class: any bytes are looked at without an exception, and what is
said of them is words and hex, never their bytes decoded as text they are not (no mojibake)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.portability.sniff import look, mistaken
from tests.helpers import examples

BYTES = (
    st.binary(max_size=300)
    | st.text(max_size=100).map(lambda t: t.encode("utf-8"))
    | st.sampled_from(
        [b"\x89PNG\r\n", b"\xff\xfeh\x00i\x00", b'\xef\xbb\xbf[{"mapping": {}}]', b'{"type":"session"}\n', b"# hi\n"]
    )
)


@settings(max_examples=examples(200), deadline=None)
@given(data=BYTES, source=st.sampled_from(["chatgpt", "claude", "jsonl", "markdown"]))
def test_any_file_is_looked_at_and_said_in_words(tmp_path_factory, data, source):
    path = tmp_path_factory.getbasetemp() / "handed.bin"
    path.write_bytes(data)
    seen = look(path)
    assert seen.kind in (None, "chatgpt", "claude", "jsonl", "markdown")
    said = mistaken(source, path)
    if said is not None:
        words = said.replace(str(path), "")
        assert words.isascii() and words.isprintable(), said  # what is said of the bytes: words and hex


def test_known_heads(tmp_path):
    cases = {
        b"": (None, "an empty file"),
        b"\x89PNG\r\n\x1a\n": (None, "a PNG image"),
        b"\xff\xfe[\x00": (None, "text in UTF-16 (save it as UTF-8)"),
        b'[{"title": "x", "mapping": {}}]': ("chatgpt", None),
        b'[{"uuid": "x", "chat_messages": [], "text": "\\"mapping\\""}]': ("claude", None),
        b'{"role": "user", "content": "hi"}\n': ("jsonl", None),
        b"hello there": (None, "text that is not JSON"),
    }
    for data, (kind, what) in cases.items():
        (tmp_path / "f").write_bytes(data)
        seen = look(tmp_path / "f")
        assert seen.kind == kind and (what is None or seen.what == what), (data, seen)
