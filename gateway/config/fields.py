"""How a setting is declared: its default, its limits and its one line of documentation, in one place.

Each setting of the schema (schema.py and the section modules beside it) is a dataclass field made by
`setting()`: the default first, then the limits the loader enforces (`ge`/`le` bounds, `choices`, `on_from`
for a setting where 0 turns something off), then `doc`, which `jarvis config`, `--help` and the docs show
beside the default. Every number is held within `NUMBER_LIMIT` whatever its own bounds say.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


NUMBER_LIMIT = 2**53
"""No number setting goes beyond this (in absolute value), whatever its own bounds: every integer up to
it is exact as a float too, and it is far past any sensible count, size or duration."""


# Validation rules, attached to fields via metadata: ge/le bounds, a set of allowed choices, and for a
# setting where 0 turns something off, the least value that turns it on (`on_from`: a period of 1e-300
# seconds would spin a loop); `registry`: the value names something registered above this layer (its
# registry checks it: see the field).
def setting(
    default: Any = dataclasses.MISSING,
    *,
    ge=None,
    le=None,
    choices=None,
    on_from=None,
    factory=None,
    doc="",
    registry="",
):
    meta = {"ge": ge, "le": le, "choices": choices, "on_from": on_from, "doc": doc, "registry": registry}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def limits(meta: Any) -> str:
    """A number setting's declared bounds as a person reads them ("1 to 1000", "0 (off) or at least 1"),
    for `jarvis config --defaults`; "" where it declares none."""

    def shown(v: float) -> str:
        return f"{v:g}" if isinstance(v, float) else str(v)

    low, high, on = meta.get("ge"), meta.get("le"), meta.get("on_from")
    if on is not None:
        return f"0 (off), or {shown(on)} to {shown(high)}" if high is not None else f"0 (off) or at least {shown(on)}"
    if low is not None and high is not None:
        return f"{shown(low)} to {shown(high)}"
    if low is not None:
        return f"at least {shown(low)}"
    return f"at most {shown(high)}" if high is not None else ""
