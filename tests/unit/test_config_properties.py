"""Every configuration key against hostile values (issue 36, class 1): the key list and each key's
declared type come from the config dataclasses themselves, never from a list kept here.

A value given in config.toml, the environment or a flag is either accepted — and then the gateway
starts and works with it — or refused with a ConfigError that names the key (the CLI prints it and
exits 2). Never a NaN that compares false with every bound, an infinity, a number no C call takes, a
NUL no path or socket takes, or a gateway that starts but hangs.

The loader is fast, so it sees many examples; a real gateway is started only for a sample of the
accepted ones (`test_accepted_values_start_a_working_gateway`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import re
from pathlib import Path
from typing import Any, get_args, get_type_hints

import pytest
import structlog
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from gateway import config as config_module
from gateway.auth import token_problem
from gateway.config import ENV_VARS, Config, ConfigError, load_config
from tests.helpers import RunningGateway, examples, make_config
from tests.hostile_values import logged_failures


def _walk(obj: Any, prefix: str = "") -> list[tuple[str, Any, dataclasses.Field]]:
    hints = get_type_hints(type(obj))
    out = []
    for f in dataclasses.fields(obj):
        key = prefix + config_module.camel(f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            out += _walk(getattr(obj, f.name), key + ".")
        else:
            out.append((key, hints[f.name], f))
    return out


SETTINGS = _walk(Config())  # (dotted camelCase key, declared type, dataclass field), every leaf
KEYS = [key for key, _, _ in SETTINGS]
TYPES = {key: typ for key, typ, _ in SETTINGS}
FIELDS = {key: f for key, _, f in SETTINGS}


def test_the_walk_sees_every_key():
    assert len(KEYS) > 100 and "memory.search.halfLifeDays" in KEYS and "server.handshakeTimeout" in KEYS
    assert {k for k, _, _ in config_module.describe()} == set(KEYS)


def test_every_setting_says_what_it_does_where_it_is_declared():
    """A setting's default, limits and one line of documentation are declared together, once (config/fields.py's
    `setting()`); `jarvis config --defaults` shows that line beside the default, so none may be missing."""
    assert [key for key, _, f in SETTINGS if not f.metadata.get("doc", "").strip()] == []
    assert {key: doc for key, _, doc in config_module.describe()} == {k: f.metadata["doc"] for k, f in FIELDS.items()}


# ---- hostile values ---------------------------------------------------------------------------------
ODD_TEXT = st.sampled_from(
    ["", " ", "\t", "\x00", "a\x00b", "nan", "NaN", "inf", "-inf", "1e400", "-1", "0x10", "1_0", "٣", "\u00a0"]
    + ["\u202e", "\ufeff", "𝟙", "Ⅻ", "ｆａｌｓｅ", "null", "[]", "true", "yes", "..", "/", "~", "\n"]
)
NUMBERS = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e-300, 5e-324, 1e308, -1e308]),
    st.sampled_from([2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30, 10**5000]),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-3, 70_000),
)
TEXT = st.one_of(ODD_TEXT, st.text(st.characters(exclude_categories=["Cs"]), max_size=40))
SCALARS = st.one_of(NUMBERS, TEXT, st.booleans())
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.dictionaries(st.sampled_from(["a", "port", "x y"]), SCALARS, max_size=2),
)


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v) if -(10**4000) < v < 10**4000 else "9" * 5000  # str() of more digits raises
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
    if isinstance(v, str):
        out = []
        for ch in v:
            if ch in '"\\':
                out.append("\\" + ch)
            elif " " <= ch <= "~":
                out.append(ch)
            else:
                out.append(f"\\U{ord(ch):08x}")
        return '"' + "".join(out) + '"'
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f'"{k}" = {toml_value(x)}' for k, x in v.items()) + "}"
    raise TypeError(v)


def env_text(v: Any) -> str | None:
    """`v` as an environment variable's text would hold it (a surrogate-escaped byte included), or None."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v) if -(10**4000) < v < 10**4000 else "9" * 5000  # str() of more digits raises
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return v or None  # an empty variable counts as unset
    return None


def near_values(key: str) -> list[Any]:
    """Values near the rules of `key`: its choices, around its bounds, true and false, tool lists."""
    typ = TYPES[key]
    meta = FIELDS[key].metadata
    near: list[Any] = []  # values close to the rules of this key, beside the hostile ones
    if meta.get("choices"):
        near += list(meta["choices"])
    for bound in ("ge", "le", "on_from"):
        if meta.get(bound) is not None:
            b = meta[bound]
            near += [b, b - 1, b + 1, b * 2, b / 2, b - 1e-9, float(b)]
    if typ is bool or get_args(typ):
        near += [True, False, [], ["memory_search"], ["memory_search", "nope"]]
    return near


def value_for(key: str) -> st.SearchStrategy[Any]:
    """Hostile values for `key`, and values near its own rules."""
    near = near_values(key)
    return st.one_of(VALUES, st.sampled_from(near)) if near else VALUES


@st.composite
def hostile(draw) -> tuple[str, str, Any]:
    """(key, route, value): a key from the dataclasses, how the value arrives, the value."""
    key = draw(st.sampled_from(KEYS))
    value = draw(value_for(key))
    routes = ["toml", "flag"] + (["env"] if key in ENV_VARS.values() else [])
    route = draw(st.sampled_from(routes))
    if route == "env":
        text = env_text(value)
        assume(text is not None)
        value = text
        if draw(st.booleans()):  # a byte that is not UTF-8, as os.environ hands it over
            value = value + "\udcff"
    return key, route, value


def load(tmp_path: Path, key: str, route: str, value: Any) -> Config:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    cfg_file = state / "config.toml"
    cfg_file.write_text("")
    env: dict[str, str] = {}
    overrides: dict[str, Any] = {"stateDir": str(state)}
    if route == "toml":
        cfg_file.write_text(".".join(f'"{p}"' for p in key.split(".")) + f" = {toml_value(value)}\n")
    elif route == "env":
        env[next(var for var, k in ENV_VARS.items() if k == key)] = value
    else:
        overrides[key] = value
    if key == "stateDir":
        overrides = {"stateDir": str(state)}
    return load_config(overrides, env=env, config_file=cfg_file)


def check_accepted(cfg: Config, key: str) -> None:
    """What an accepted value must be: its declared type, finite, inside its declared bounds, text
    that a path, a socket and both storage engines can hold."""
    obj: Any = cfg
    for part in key.split("."):
        obj = getattr(obj, re.sub(r"[A-Z]", lambda m: "_" + m.group().lower(), part))
    meta = FIELDS[key].metadata
    typ = TYPES[key]
    if typ in (int, float):
        assert type(obj) is typ, (key, obj)
        assert math.isfinite(obj), (key, obj)
        assert abs(obj) <= config_module.NUMBER_LIMIT, (key, obj)
        if meta.get("ge") is not None:
            assert obj >= meta["ge"], (key, obj)
        if meta.get("le") is not None:
            assert obj <= meta["le"], (key, obj)
        if meta.get("on_from") is not None and obj:
            assert obj >= meta["on_from"], (key, obj)
    texts = [obj] if isinstance(obj, str) else [str(obj)] if isinstance(obj, Path) else []
    texts += [t for t in obj if isinstance(t, str)] if isinstance(obj, list) else []
    for t in texts:
        assert "\x00" not in t, (key, obj)
        t.encode("utf-8")  # no lone surrogate
    if key == "token" and obj:
        assert token_problem(obj) is None, obj  # the one token rule (auth.py)


HYPO = settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@HYPO
@given(hostile())
def test_every_key_takes_a_hostile_value_or_refuses_it_naming_the_key(tmp_path, case):
    key, route, value = case
    try:
        cfg = load(tmp_path, key, route, value)
    except ConfigError as exc:
        assert exc.errors, exc
        if route == "toml" and "9" * 5000 in toml_value(value):
            assert "not valid TOML" in str(exc), exc  # the parser cannot say which key; it names the file
            return
        for err in exc.errors:
            assert err.startswith(f"{key}:") or f"{key}" in err.split(":", 1)[0] or key in err, (key, err)
            assert len(err) < 600, "the message quotes a bounded part of the value"
        return
    check_accepted(cfg, key)


@pytest.mark.parametrize(
    "text,key",
    [
        ("[server]\nhandshakeTimeout = nan\n", "server.handshakeTimeout: must be a finite number"),
        ("[server]\npingInterval = inf\n", "server.pingInterval: must be a finite number"),
        ("[server]\npingInterval = 1e-300\n", "server.pingInterval: must be 0 (off) or at least 1.0"),
        ("[server]\nshutdownGrace = nan\n", "server.shutdownGrace: must be a finite number"),
        ("[chat]\ntimeout = -inf\n", "chat.timeout: must be a finite number"),
        ("[memory.search]\nrrfK = 18446744073709551616\n", "memory.search.rrfK: must be <="),
        ('[chat]\nmodel = "a\\u0000b"\n', "chat.model: must not contain NUL"),
        ('workspace = "/tmp/a\\u0000b"\n', "workspace: must not contain NUL"),
    ],
)
def test_not_a_number_is_refused_naming_the_key(tmp_path, text, key):
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(ConfigError, match=re.escape(key)):
        load_config({"stateDir": str(tmp_path)}, env={})


def test_the_environment_and_flags_follow_the_same_rules(tmp_path):
    for env, key in [
        ({"JARVIS_PORT": "nan"}, "server.port: must be an integer"),
        ({"JARVIS_HTTP_PORT": "1e400"}, "server.httpPort: must be an integer"),
        ({"JARVIS_CHAT_MODEL": "m\udcff"}, "chat.model: must be valid Unicode"),
        ({"JARVIS_WORKSPACE": "/tmp/w\udcff"}, "workspace: must be valid Unicode"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(key)):
            load_config({"stateDir": str(tmp_path)}, env=env)
    for flag, value, key in [
        ("server.handshakeTimeout", "nan", "server.handshakeTimeout: must be a finite number"),
        ("sessions.ephemeralMaxAgeHours", "inf", "sessions.ephemeralMaxAgeHours: must be a finite number"),
        ("server.host", "a\x00b", "server.host: must not contain NUL"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(key)):
            load_config({"stateDir": str(tmp_path), flag: value}, env={})


# ---- a sample of accepted values, each in a real gateway -----------------------------------------------
# Keys whose accepted values change what a started gateway does on every turn, kept apart from keys that
# name things outside this machine (an endpoint, a database), which a test cannot reach.
OUTSIDE = {"storage.url", "chat.apiKey", "chat.baseUrl", "memory.embeddings.apiKey", "memory.embeddings.baseUrl"}
STARTABLE = [k for k in KEYS if k not in OUTSIDE and k not in ("stateDir", "server.port", "server.httpPort")]


@st.composite
def accepted(draw) -> tuple[str, Any]:
    key = draw(st.sampled_from(STARTABLE))
    near = near_values(key)  # mostly values that may be accepted: a refusal starts nothing
    return key, draw(st.sampled_from(near) if near and draw(st.integers(0, 3)) else value_for(key))


async def run_gateway(state: Path, key: str, value: Any) -> str:
    """Start a gateway with `key = value` (memory on), talk to it, stop it; → what happened."""
    try:
        cfg = make_config(state, memory=True, **{key: value})
    except ConfigError as exc:
        assert all(key in e for e in exc.errors), exc.errors
        return "refused"
    gw = RunningGateway(cfg)
    with structlog.testing.capture_logs() as logs:
        async with asyncio.timeout(30):  # a start, one turn and a stop: seconds, never a hang
            try:
                await gw.start()
            except OSError as exc:  # a host that is a name no resolver here knows: said, naming it
                assert key == "server.host" and cfg.server.host, exc
                return "no such host"
            try:
                c = await gw.client()
                health = await c.call("system.health")
                assert health["status"] == "ok"
                session = await c.call("sessions.create", {"label": "t"})
                started = await c.call("chat.send", {"sessionKey": session["sessionKey"], "message": "hello"})
                # The reply begins (a slow one by design, offlineDeltaDelay = 5, is not waited out), and
                # an abort ends it at once.
                first = await c.next_event(timeout=10)
                assert first["method"] in ("chat.delta", "chat.final", "chat.error", "chat.tool"), first
                if first["method"] not in ("chat.final", "chat.error"):
                    await c.call("chat.abort", {"sessionKey": session["sessionKey"]})
                    events = await c.run_to_end(started["runId"], timeout=10)
                    assert events[-1]["method"] in ("chat.final", "chat.error", "chat.aborted"), events[-1]
                assert (await c.call("sessions.history", {"sessionKey": session["sessionKey"]}))["messages"]
                await c.close()
            finally:
                await gw.stop()
    assert not logged_failures(logs, []), logged_failures(logs, [])
    return "started"


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(case=accepted())
@example(case=("server.shutdownGrace", math.nan))  # issue 36: a clean stop turned into a traceback
@example(case=("server.handshakeTimeout", math.nan))
@example(case=("server.authTimeout", math.inf))
@example(case=("server.pingInterval", math.nan))
@example(case=("chat.offlineDeltaDelay", math.nan))
@example(case=("server.pingInterval", 5e-324))  # every connection closed at once: "keepalive ping timeout"
async def test_accepted_values_start_a_working_gateway(tmp_path, monkeypatch, case):
    monkeypatch.chdir(tmp_path)  # a relative workspace lands here, not in the checkout
    key, value = case
    state = tmp_path / f"s{len(list(tmp_path.iterdir()))}"
    event(await run_gateway(state, key, value))
