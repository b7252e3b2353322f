"""gateway/principals.py: scopes, names, expiry, and the one table of which scope each method needs."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from gateway import app  # noqa: F401  (registers every method)
from gateway.errors import Invalid
from gateway.principals import METHOD_SCOPES, SCOPES, Directory, make, owner, parse_expires, parse_scopes
from gateway.registry import registry


def test_every_method_names_the_scope_it_needs():
    missing = sorted(set(registry.methods) - set(METHOD_SCOPES))
    assert not missing, f"add these to principals.METHOD_SCOPES: {missing}"
    assert set(METHOD_SCOPES.values()) <= {"", *SCOPES}


def test_scopes_imply_and_refuse():
    reader = make("r", ["main"], "read", None, "r" * 43)
    assert reader.may_call("memory.search") and not reader.may_call("memory.set") and not reader.may_call("chat.send")
    assert reader.may_call("system.health")  # what any principal may ask
    admin = make("a", "*", "admin", None, "a" * 43)
    assert all(admin.may_call(m) for m in METHOD_SCOPES) and not admin.may("proxy")
    assert owner().may_call("anything.unlisted") and not admin.may_call("anything.unlisted")
    assert reader.reaches("main") and not reader.reaches("other") and admin.reaches("other")


@pytest.mark.parametrize("bad", ["", "root", "read,,chat", [], ["read", 3]])
def test_unknown_or_empty_scopes_are_refused_naming_the_field(bad):
    with pytest.raises(Invalid) as err:
        parse_scopes(bad)
    assert err.value.field == "scopes"


def test_expiry_is_a_span_or_a_future_time():
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    assert parse_expires("30d", now) == "2030-01-31T00:00:00.000Z"
    assert parse_expires("2031-01-01T00:00:00Z", now) == "2031-01-01T00:00:00.000Z"
    for bad in ("0d", "yesterday", "2029-01-01", "5y"):
        with pytest.raises(Invalid):
            parse_expires(bad, now)
    p = make("t", "*", "read", "1h", "t" * 43, now)
    d = Directory([p])
    assert d.find("t" * 43, now) == p and d.find("t" * 43, now + timedelta(hours=2)) is None
    assert d.find("x" * 43, now) is None


@pytest.mark.parametrize("name", ["owner", "", "-x", "a b", "x" * 65, "ünï"])
def test_bad_names_are_refused(name):
    with pytest.raises(Invalid):
        make(name, "*", "read", None, "t" * 43)
