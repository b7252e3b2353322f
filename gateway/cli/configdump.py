"""`jarvis config`: the effective configuration as config.toml would say it (camelCase keys, TOML), or
as JSON; `--defaults` lists every key with its default, what it does and its limits (as declared: config/).

The TOML output is valid config.toml: feed it back and it loads to the same configuration. Secrets
are never printed (a set one shows as a comment), and neither are settings config.toml cannot hold
(the state dir, the default workspace), which appear as comments.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, get_type_hints

import orjson

from ..config import Config, camel, limits, load_config

SECRETS = {"token", "chat.apiKey", "memory.embeddings.apiKey", "storage.url"}  # a URL may hold a password


def _walk(obj: Any, prefix: str = ""):
    """(dotted camelCase key, value, field) for every setting, in declaration order; tables after scalars
    at each level so that the TOML reads top to bottom."""
    hints = get_type_hints(type(obj))
    nested = []
    for f in dataclasses.fields(obj):
        key = prefix + camel(f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            nested.append((key, getattr(obj, f.name)))
        else:
            yield key, getattr(obj, f.name), f
    for key, child in nested:
        yield from _walk(child, key + ".")


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def toml_value(value: Any) -> str:
    value = _plain(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)  # always has a '.' or an exponent, as TOML wants
    if isinstance(value, str):
        return orjson.dumps(value).decode()  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):  # an inline table

        def key(k: str) -> str:
            return k if k and all(c.isalnum() or c in "-_" for c in k) else orjson.dumps(k).decode()

        return "{" + ", ".join(f"{key(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _overridden(config: Config) -> set[str]:
    """Keys whose value comes from the environment or a flag rather than config.toml."""
    try:
        file_only = load_config({"stateDir": str(config.state_dir)}, env={})
    except Exception:  # the file alone does not load: nothing to compare with
        return set()
    mine = {k: v for k, v, _ in _walk(config)}
    return {k for k, v, _ in _walk(file_only) if mine.get(k) != v}


def to_toml(config: Config) -> str:
    defaults = {k: v for k, v, _ in _walk(Config())}
    from_outside = _overridden(config)
    config_file = config.state_dir / "config.toml"
    lines = [
        "# Jarvis Gateway: the effective configuration (`jarvis config`). Valid as config.toml.",
        f"# state dir in use: {config.state_dir}  (set with --state-dir or JARVIS_STATE_DIR, not in config.toml)",
        f"# config file: {config_file}" + ("" if config_file.exists() else "  (not present: defaults)"),
        f"# chat provider in effect: {config.chat_provider}"
        + ("  (no chat.apiKey or chat.baseUrl: the offline responder)" if config.chat_provider == "offline" else ""),
        "# `# default: …` marks a value that differs from the default; `jarvis config --defaults` lists every key.",
        "",
    ]
    section = ""
    for key, value, _f in _walk(config):
        table, _, name = key.rpartition(".")
        if table != section:
            lines += ["", f"[{table}]"]
            section = table
        if key == "stateDir":
            continue
        if key == "workspace" and value is None:
            lines.append(f"# workspace = {toml_value(str(config.workspace_dir))}  (the default: <stateDir>/workspace)")
            continue
        if key in SECRETS:
            if value:
                lines.append(f"# {name} = (set, hidden)" + ("  # from the environment" if key in from_outside else ""))
            else:
                lines.append(f'{name} = ""')
            continue
        notes = []
        if key in from_outside:
            notes.append("from the environment or a flag")
        if value != defaults.get(key) and defaults.get(key) is not None:
            notes.append(f"default: {toml_value(defaults[key])}")
        lines.append(f"{name} = {toml_value(value)}" + (f"  # {'; '.join(notes)}" if notes else ""))
    return "\n".join(lines).replace("\n\n\n", "\n\n") + "\n"


def to_json(config: Config) -> dict[str, Any]:
    """The effective configuration as nested camelCase JSON; secrets as "(set)" or ""."""
    out: dict[str, Any] = {}
    for key, value, _f in _walk(config):
        if key in SECRETS:
            value = "(set)" if value else ""
        elif key == "workspace":
            value = config.workspace_dir
        cur = out
        *tables, name = key.split(".")
        for t in tables:
            cur = cur.setdefault(t, {})
        cur[name] = _plain(value)
    return out


def defaults_toml() -> str:
    lines = [
        "# Every config.toml key with its default (`jarvis config --defaults`).",
        "# The state dir is set with --state-dir or JARVIS_STATE_DIR, never in config.toml.",
        "",
    ]
    section = ""
    for key, value, f in _walk(Config()):
        table, _, name = key.rpartition(".")
        if key == "stateDir":
            continue
        if table != section:
            lines += ["", f"[{table}]"]
            section = table
        doc = f.metadata.get("doc", "")
        choices = _choices(f)
        bounds = limits(f.metadata)
        if bounds:
            doc = (doc + "; " if doc else "") + "allowed: " + bounds
        if choices:
            doc = (doc + "; " if doc else "") + "one of " + ", ".join(choices)
        if value is None:
            lines.append(f'# {name} = "…"' + (f"  # {doc}" if doc else ""))
            continue
        lines.append(f"{name} = {toml_value(value)}" + (f"  # {doc}" if doc else ""))
    return "\n".join(lines).replace("\n\n\n", "\n\n") + "\n"


def _choices(f: dataclasses.Field) -> tuple[str, ...]:
    """A key's allowed values: its own choices, or what is registered (embedding providers, plugins too)."""
    if f.metadata.get("registry") == "embedding providers":
        from ..memory.embeddings.registry import providers

        return tuple(providers())
    return tuple(f.metadata.get("choices") or ())


LIMITS = {"ge": "min", "le": "max", "on_from": "onFrom"}  # a number's declared bounds, as --defaults --json names them


def defaults_json() -> dict[str, Any]:
    return {
        key: {
            "default": _plain(value),
            "doc": f.metadata.get("doc", ""),
            **({"choices": list(choices)} if (choices := _choices(f)) else {}),
            **{name: f.metadata[rule] for rule, name in LIMITS.items() if f.metadata.get(rule) is not None},
        }
        for key, value, f in _walk(Config())
        if key != "stateDir"
    }
