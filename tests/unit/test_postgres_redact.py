"""`redact`: a database URL as messages and logs show it, never with its password."""

import pytest

from gateway.storage.postgres import redact


@pytest.mark.parametrize(
    "url,shown",
    [
        ("postgresql://jarvis:secret@db.internal/jarvis", "postgresql://jarvis:***@db.internal/jarvis"),
        # A raw "@" in a password (it belongs percent-encoded) must not show the part after it.
        ("postgresql://jarvis:p@ss@db/x", "postgresql://jarvis:***@db/x"),
        (
            "postgresql://db/x?user=a&password=sec&sslmode=require",
            "postgresql://db/x?user=a&password=***&sslmode=require",
        ),
        ("postgres://u:pw@h:5432/d?password=pw", "postgres://u:***@h:5432/d?password=***"),
        ("postgresql://postgres:@/t_1?host=/tmp/x", "postgresql://postgres:***@/t_1?host=/tmp/x"),
        ("postgresql://jarvis@db/x", "postgresql://jarvis@db/x"),
        ("postgresql://db/x", "postgresql://db/x"),
    ],
)
def test_the_password_is_hidden(url, shown):
    assert redact(url) == shown
