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


# ---- the dispatcher admits exactly what the published table says, for every method and every scope set --
import itertools  # noqa: E402
import re  # noqa: E402

from hypothesis import given, settings, strategies as st  # noqa: E402

from gateway.dispatcher import Dispatcher  # noqa: E402
from gateway.errors import Forbidden, NotFound  # noqa: E402
from gateway.principals import ALSO, AUDITED, IMPLIES, Principal, agent_for_user, anonymous_agent  # noqa: E402
from gateway.calls import Call, Door, ForUser  # noqa: E402
from tests.helpers import ROOT, examples  # noqa: E402


def published_scope_table() -> dict[str, set[str]]:
    """docs/protocol.md's scope table, read as a reader would: each row's scope → the methods it names
    (`sessions.get/list` is sessions.get and sessions.list, `principals.*` every principals method;
    names without a dot, such as a path, are not methods); `admin` has every row above it too. The
    row "(any)" is keyed "". Independent of gateway/principals.py, which it is held against."""
    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    lines = text[text.index("| scope | methods |") :].splitlines()[2:]
    table: dict[str, set[str]] = {}
    for line in itertools.takewhile(lambda s: s.startswith("|"), lines):
        scope_cell, methods_cell = (c.strip() for c in line.strip("|").split("|"))
        scope = "" if scope_cell == "(any)" else scope_cell.strip("`")
        names: set[str] = set()
        for token in re.findall(r"`([^`]+)`", methods_cell):
            if token.startswith("/") or "." not in token:
                continue
            head, _, tails = token.partition(".")
            for tail in tails.split("/"):
                if tail == "*":
                    names |= {m for m in registry.methods if m.startswith(head + ".")}
                else:
                    names.add(f"{head}.{tail}")
        if scope == "admin":
            names |= set().union(*table.values())  # "everything above, and …"
        table[scope] = names
    return table


PUBLISHED = published_scope_table()


def test_the_published_table_names_registered_methods_only():
    assert set(PUBLISHED) == {"", *SCOPES}, "a row per scope, and (any)"
    named = set().union(*PUBLISHED.values())
    assert sorted(named - set(registry.methods)) == [], "the table names a method the gateway does not have"
    assert PUBLISHED["proxy"] == set(), "proxy opens /v1 acting for users, no method of its own"


def test_admit_agrees_with_the_published_scope_table():
    """Every method, every non-empty set of scopes: admitted exactly when the table names the method in
    (any) or in a row of one of the scopes; a method in no row is the owner's alone."""
    wrong = []
    for n in range(1, len(SCOPES) + 1):
        for scopes in itertools.combinations(SCOPES, n):
            p = Principal("someone", None, frozenset(scopes), "0" * 64, "2026-01-01T00:00:00.000Z")
            for method, spec in registry.methods.items():
                published = method in PUBLISHED[""] or any(method in PUBLISHED[s] for s in scopes)
                try:
                    Dispatcher.admit(p, spec)
                    admitted = True
                except Forbidden:
                    admitted = False
                if admitted != published:
                    wrong.append(f"{method} with {','.join(scopes)}: {'admitted' if admitted else 'refused'}")
    assert wrong == [], f"the gateway and docs/protocol.md's scope table disagree: {wrong[:20]}"


AGENT_IDS = st.text("abcxyz", min_size=1, max_size=3)


@settings(max_examples=examples(300), deadline=None)
@given(
    method=st.sampled_from(sorted(registry.methods)),
    scopes=st.frozensets(st.sampled_from(SCOPES), min_size=1),
    agents=st.one_of(st.none(), st.lists(AGENT_IDS, min_size=1, max_size=3, unique=True).map(tuple)),
    asked=st.one_of(st.none(), AGENT_IDS),
)
def test_admit_and_reach_agree_with_the_scope_table(method, scopes, agents, asked):
    p = Principal("someone", agents, scopes, "0" * 64, "2026-01-01T00:00:00.000Z")
    spec = registry.methods[method]
    needs = METHOD_SCOPES[method]
    granted = set(scopes).union(*(IMPLIES.get(s, frozenset()) for s in scopes))
    try:
        Dispatcher.admit(p, spec)
        admitted = True
    except Forbidden as exc:
        admitted = False
        assert exc.data == {"scope": needs, "method": method} and repr(needs) in exc.message
    assert admitted == (needs == "" or needs in granted or ALSO.get(method) in granted)

    if "agentId" not in spec.params.fields:
        return
    try:
        got = Dispatcher.reach(p, spec, {"agentId": asked})
    except NotFound as exc:
        assert agents is not None and asked is not None and asked not in agents
        assert exc.message == f"agent not found: {asked}" and exc.data == {"agentId": asked}
        return
    if agents is None:
        assert got == {"agentId": asked}  # every agent: what was asked (none: the configured one)
    else:
        assert got["agentId"] == (agents[0] if asked is None else asked) and got["agentId"] in agents


def test_the_owner_is_admitted_everywhere_and_every_audited_method_waits():
    for spec in registry.methods.values():
        Dispatcher.admit(owner(), spec)
        assert Dispatcher.reach(owner(), spec, {"agentId": None}) == {"agentId": None}
    for name in AUDITED:  # the audit is written on the awaited path (dispatcher.perform)
        assert registry.methods[name].waits, name


@settings(max_examples=examples(200), deadline=None)
@given(
    scopes=st.frozensets(st.sampled_from(SCOPES), min_size=1),
    agents=st.one_of(st.none(), st.lists(AGENT_IDS, min_size=1, max_size=3, unique=True).map(tuple)),
    user=st.one_of(st.none(), st.text(min_size=1, max_size=80)),
    asked=st.one_of(st.none(), AGENT_IDS),
)
def test_a_front_ends_request_for_a_user_reaches_that_users_agent_alone(scopes, agents, user, asked):
    """/v1's request for a front-end's user (Call.for_user): with `proxy`, the dispatcher narrows the principal
    to the user's agent (the front-end's anonymous one when it names none) and reaches nothing else; without
    it, and for the owner, the call acts as it came."""
    p = Principal("front", agents, scopes, "0" * 64, "2026-01-01T00:00:00.000Z")
    call = Dispatcher.acting(Call(Door.OPENAI, "chat.relay", {}, p, for_user=ForUser(user)))
    spec = registry.methods["chat.relay"]
    if "proxy" not in scopes:
        assert call.principal is p
        return
    mine = anonymous_agent("front") if user is None else agent_for_user(user)
    assert call.principal.agents == (mine,) and call.principal.name == "front"
    assert Dispatcher.reach(call.principal, spec, {"agentId": None}) == {"agentId": mine}
    if asked is not None and asked != mine:
        with pytest.raises(NotFound):
            Dispatcher.reach(call.principal, spec, {"agentId": asked})
    assert Dispatcher.acting(Call(Door.OPENAI, "chat.relay", {}, owner(), for_user=ForUser(user))).principal == owner()
    assert (
        Dispatcher.acting(Call(Door.OPENAI, "chat.relay", {}, p)).principal is p
    )  # not a front-end's request for a user
