"""The loader: defaults → `<stateDir>/config.toml` → environment → overrides, each value checked against
its declaration (`_coerce`), an unknown key answered with a "did you mean", then the rules that join
settings (`_validate`). Every problem is reported at once, each message starting with its key."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Mapping, get_args, get_origin, get_type_hints

from ..auth import token_problem
from ..schema import AGENT_ID
from ..tools.specs import CATALOG
from .chat import TOOL_POLICIES
from .fields import NUMBER_LIMIT, camel
from .schema import ENV_VARS, Config


class ConfigError(ValueError):
    """A configuration value is invalid. The message starts with the key; when several are, `errors`
    holds each one's message (the message joins them, one per line)."""

    def __init__(self, message: str, errors: list[str] | None = None):
        super().__init__(message)
        self.errors = errors or [message]


def _shown(value: Any, limit: int = 60) -> str:
    """`value` as an error message quotes it: repr, cut to `limit` characters (a huge integer by its size:
    repr() of one past 4,300 digits raises)."""
    if isinstance(value, int) and not -(10**30) < value < 10**30:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _text(key: str, value: str) -> str:
    """A string setting's one rule: text that a path, a socket and both storage engines can hold."""
    if "\x00" in value:
        raise ConfigError(f"{key}: must not contain NUL (U+0000) characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: a byte of the environment that is not UTF-8
        raise ConfigError(f"{key}: must be valid Unicode text (UTF-8 in the environment and in files)") from None
    return value


def _number(key: str, value: Any, typ: type, meta: Mapping[str, Any], from_text: bool) -> int | float:
    """An int or float setting: its type, finite, inside its declared bounds and NUMBER_LIMIT."""
    kind = "an integer" if typ is int else "a number"
    if from_text and isinstance(value, str):
        try:
            value = int(value.strip()) if typ is int else float(value)
        except ValueError:
            raise ConfigError(f"{key}: must be {kind}, got {_shown(value)}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (typ is int and not isinstance(value, int)):
        raise ConfigError(f"{key}: must be {kind}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}: must be a finite number, got {value}")
    low, high = meta.get("ge"), meta.get("le")
    high = NUMBER_LIMIT if high is None else min(high, NUMBER_LIMIT)
    low = -NUMBER_LIMIT if low is None else max(low, -NUMBER_LIMIT)
    if not value >= low:  # `not >=`: true for anything unordered, should one ever get here
        raise ConfigError(f"{key}: must be >= {low}, got {_shown(value)}")
    if not value <= high:
        raise ConfigError(f"{key}: must be <= {high}, got {_shown(value)}")
    if meta.get("on_from") is not None and value != 0 and not value >= meta["on_from"]:
        raise ConfigError(f"{key}: must be 0 (off) or at least {meta['on_from']}, got {_shown(value)}")
    return typ(value)


def _coerce(key: str, value: Any, typ: Any, meta: Mapping[str, Any], from_text: bool) -> Any:
    """Check (and for env/CLI text, convert) one value against its declared type and rules."""
    origin = get_origin(typ)
    if get_args(typ) == (bool, list[str]):  # true / false / a list of names
        if isinstance(value, bool) or (
            from_text
            and isinstance(value, str)
            and value.strip().lower() in ("1", "true", "yes", "on", "0", "false", "no", "off")
        ):
            return _coerce(key, value, bool, meta, from_text)
        if not isinstance(value, (list, str)):
            raise ConfigError(f"{key}: must be true, false or a list of tool names")
        return _coerce(key, value, list[str], meta, from_text)
    if origin is dict:  # a table of names to strings (chat.toolPolicy); _validate checks names and values
        if from_text and isinstance(value, str):  # "memory_delete=allow,memory_set=ask"
            pairs = [v.split("=", 1) for v in value.split(",") if v.strip()]
            if not all(len(p) == 2 for p in pairs):
                raise ConfigError(f"{key}: must be name=value pairs separated by commas, got {_shown(value)}")
            value = {n.strip(): v.strip() for n, v in pairs}
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            raise ConfigError(f"{key}: must be a table of names to strings")
        return {_text(key, str(n)): _text(f"{key}.{n}", v) for n, v in value.items()}
    if typ == list[int]:  # ports: "11434, 8080" from the environment
        if from_text and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or len(value) > 64:
            raise ConfigError(f"{key}: must be a list of at most 64 port numbers")
        return [int(_number(f"{key}[{i}]", v, int, {"ge": 1, "le": 65535}, from_text)) for i, v in enumerate(value)]
    if origin is list:
        if from_text and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: must be a list of strings")
        return [_text(key, v) for v in value]
    if typ is Path or (origin is not None and Path in get_args(typ)):
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key}: must be a non-empty path string")
        return Path(_text(key, value)).expanduser()
    if typ is bool:
        if from_text and isinstance(value, str):
            low = value.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: must be true or false")
        return value
    if typ is int or typ is float:
        return _number(key, value, typ, meta, from_text)
    if typ is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: must be a string")
        if meta.get("choices") and value not in meta["choices"]:
            raise ConfigError(f"{key}: must be one of {', '.join(meta['choices'])}; got {_shown(value)}")
        return _text(key, value)
    raise ConfigError(f"{key}: unsupported type")  # pragma: no cover - declarations are ours


def _apply(obj: Any, data: Mapping[str, Any], prefix: str, from_text: bool, errors: list[str]) -> None:
    """Apply a nested mapping of camelCase keys onto dataclass `obj`, validating every value; each bad
    one is added to `errors` (and left at its default) so that all of them are reported at once."""
    hints = get_type_hints(type(obj))
    fields = {camel(f.name): f for f in dataclasses.fields(obj)}
    for key, value in data.items():
        full = f"{prefix}{key}"
        f = fields.get(key)
        if f is None:
            errors.append(f"{full}: unknown key{_did_you_mean(key, fields)} (known here: {', '.join(sorted(fields))})")
            continue
        typ = hints[f.name]
        if dataclasses.is_dataclass(typ):
            if not isinstance(value, Mapping):
                errors.append(f"{full}: must be a table")
                continue
            _apply(getattr(obj, f.name), value, f"{full}.", from_text, errors)
            continue
        try:
            coerced = _coerce(full, value, typ, f.metadata, from_text)
            if get_origin(typ) is dict:  # a table merges over what the file (or defaults) set
                coerced = {**getattr(obj, f.name), **coerced}
            setattr(obj, f.name, coerced)
        except ConfigError as exc:
            errors.append(str(exc))


def _did_you_mean(key: str, known: Mapping[str, Any]) -> str:
    """ ", did you mean 'historyMessages'?" for a key a letter or two from a known one (its case aside too)."""
    import difflib

    by_lower = {k.lower(): k for k in known}
    if str(key).lower() in by_lower:
        return f", did you mean {by_lower[str(key).lower()]!r}?"
    close = difflib.get_close_matches(str(key).lower(), list(by_lower), n=1, cutoff=0.75)
    return f", did you mean {by_lower[close[0]]!r}?" if close else ""


def _nest(dotted: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cur = out
    parts = dotted.split(".")
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
    return out


_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


def _is_host(host: str) -> bool:
    """An address to bind: an IP address (IPv6 with a zone too), or a DNS name; "" binds every address."""
    import ipaddress

    if host == "":
        return True
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    return len(name) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in name.split("."))


HTTP_URL_SETTINGS = ("chat.baseUrl", "memory.embeddings.baseUrl")  # every setting that is an endpoint's URL


def _http_url_problem(url: str) -> str | None:
    """Why `url` is no http(s) endpoint a client can call (as far as one can tell without calling it)."""
    from urllib.parse import urlsplit

    example = "e.g. http://127.0.0.1:11434/v1"
    if not re.match(r"^https?://", url, re.I):
        return f"must be an http:// or https:// URL ({example}), got {_shown(url)}"
    if re.search(r"[\x00-\x20\x7f]", url):
        return "must not contain spaces or control characters (percent-encode them)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError when the port is not a number in 0..65535
    except ValueError as exc:
        return f"not a valid URL: {exc}"
    host = parts.hostname or ""
    if not host or not (_is_host(host) or ":" in host):  # (":": an IPv6 address, as [::1])
        return f"must name a host ({example}), got {_shown(url)}"
    return None


def _database_url_problem(url: str) -> str | None:
    """Why `url` is no PostgreSQL URL the driver can use (as far as one can tell without connecting)."""
    from urllib.parse import parse_qs, urlsplit

    if not re.match(r"^postgres(ql)?://", url):
        return "must be a postgresql:// URL (or empty for files in the state dir)"
    if re.search(r"[\x00-\x20\x7f]", url):
        return "must not contain spaces or control characters (percent-encode them)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError when the port is not a number in 0..65535
        query = parse_qs(parts.query, strict_parsing=False)
    except ValueError as exc:
        return f"not a valid URL: {exc}"
    for mode in query.get("sslmode", []):
        if mode not in _SSLMODES:
            return f"sslmode must be one of {', '.join(_SSLMODES)}, got {_shown(mode)}"
    return None


def _setting(cfg: Config, dotted: str) -> Any:
    """The value of a dotted camelCase key ("chat.baseUrl")."""
    obj: Any = cfg
    for part in dotted.split("."):
        obj = getattr(obj, re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), part))
    return obj


def _validate(cfg: Config) -> None:
    if not re.fullmatch(AGENT_ID, cfg.agent_id):
        raise ConfigError("agentId: must match [A-Za-z0-9._-]{1,64} and not be dots only")
    if cfg.memory.chunking.overlap >= cfg.memory.chunking.tokens:
        raise ConfigError("memory.chunking.overlap: must be smaller than memory.chunking.tokens")
    problem = token_problem(cfg.token) if cfg.token else None
    if problem:
        raise ConfigError(
            f"token: {problem} (--token, JARVIS_GATEWAY_TOKEN or config). Leave it unset to use the generated one (jarvis token)"
        )
    if cfg.sessions.history_max_bytes + (64 << 10) > cfg.server.max_reply_bytes:
        raise ConfigError(
            f"sessions.historyMaxBytes: a page of {cfg.sessions.history_max_bytes} bytes does not fit "
            f"server.maxReplyBytes ({cfg.server.max_reply_bytes}) with room to spare; lower it"
        )
    if isinstance(cfg.chat.tools, list):
        unknown = [t for t in cfg.chat.tools if t not in CATALOG]
        if unknown:
            raise ConfigError(f"chat.tools: unknown tool {unknown[0]!r} (known: {', '.join(CATALOG)}); or true / false")
    destructive = [t.name for t in CATALOG.values() if t.destructive]
    for name, policy in cfg.chat.tool_policy.items():
        if name not in destructive:
            raise ConfigError(
                f"chat.toolPolicy.{name}: only destructive tools take a policy ({', '.join(destructive)}); "
                "leave a tool out of chat.tools to switch it off"
            )
        if policy not in TOOL_POLICIES:
            raise ConfigError(
                f"chat.toolPolicy.{name}: must be one of {', '.join(TOOL_POLICIES)}; got {_shown(policy)}"
            )
    if cfg.chat.max_reply_chars * 6 + (64 << 10) > cfg.server.max_reply_bytes:
        raise ConfigError(
            f"chat.maxReplyChars: {cfg.chat.max_reply_chars} chars may encode to more than "
            f"server.maxReplyBytes ({cfg.server.max_reply_bytes}); lower it or raise maxReplyBytes"
        )
    for key in HTTP_URL_SETTINGS:
        url = _setting(cfg, key)
        if url:
            problem = _http_url_problem(url)
            if problem:
                raise ConfigError(f"{key}: {problem}")
    if cfg.storage.url:
        problem = _database_url_problem(cfg.storage.url)
        if problem:
            raise ConfigError(f"storage.url: {problem}")
    if not _is_host(cfg.server.host):
        raise ConfigError(
            f"server.host: must be an IP address or a host name (letters, digits, '-' and '.'), "
            f"got {_shown(cfg.server.host)}"
        )
    if cfg.server.max_pending_per_address > cfg.server.max_pending_sockets:
        raise ConfigError(
            f"server.maxPendingPerAddress: must be <= server.maxPendingSockets ({cfg.server.max_pending_sockets})"
        )
    if cfg.server.http_body_bytes_in_flight < cfg.server.http_max_body_bytes:
        raise ConfigError(
            f"server.httpBodyBytesInFlight: must be >= server.httpMaxBodyBytes ({cfg.server.http_max_body_bytes}), "
            "or no request of the largest size could ever be taken"
        )
    if cfg.server.http_max_streams >= cfg.server.http_max_per_token:
        raise ConfigError(
            f"server.httpMaxStreams: must be < server.httpMaxPerToken ({cfg.server.http_max_per_token}), "
            "so idle event streams never take a token's last requests"
        )
    for origin in cfg.server.allowed_origins:
        if not re.match(r"^https?://[^/\s]+$", origin):
            raise ConfigError(f"server.allowedOrigins: {origin!r} is not an origin like http://host:port")


def load_config(
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> Config:
    """Build the Config: defaults → config.toml → environment → `overrides` (dotted camelCase keys).

    The state dir (which locates config.toml) is itself taken from overrides or the environment first.
    """
    env = os.environ if env is None else env
    overrides = dict(overrides or {})
    cfg = Config()
    errors: list[str] = []

    state_dir = overrides.get("stateDir") or env.get("JARVIS_STATE_DIR")
    if state_dir:
        cfg.state_dir = _coerce("stateDir", state_dir, Path, {}, True)
    path = config_file or cfg.state_dir / "config.toml"
    if path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a 5,000-digit number
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        data.pop("stateDir", None)  # the file lives in the state dir; it cannot move it
        _apply(cfg, data, "", False, errors)

    for var, key in ENV_VARS.items():
        if key == "stateDir":
            continue
        value = env.get(var)
        if value:
            _apply(cfg, _nest(key, value), "", True, errors)
    for key, value in overrides.items():
        if key == "stateDir" or value is None:
            continue
        _apply(cfg, _nest(key, value), "", True, errors)
    if not errors:  # the cross-field rules only mean something once every value is valid
        try:
            _validate(cfg)
        except ConfigError as exc:
            errors.append(str(exc))
    if errors:
        raise ConfigError("\n".join(errors), errors)
    return cfg
