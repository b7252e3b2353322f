"""The gateway token's shape."""

from __future__ import annotations

import re

from gateway.auth import new_token


def test_a_new_token_is_never_read_as_a_command_line_option():
    """token_urlsafe starts one token in 64 with "-", which argparse (jarvis mcp --token …) takes for an
    option: CI met it once. 4,000 tokens would all but surely include such a start."""
    tokens = {new_token() for _ in range(4000)}
    assert len(tokens) == 4000
    for token in tokens:
        assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{42}", token), token
