"""Tiny declarative param schemas: one declaration validates params and renders JSON Schema.

    PARAMS = Obj(
        sessionKey=Str(pattern=SESSION_KEY),
        limit=Int(1, 500, default=50),
    )
    clean = PARAMS.validate(raw)          # raises Invalid("must be <= 500", field="limit")
    PARAMS.json_schema()                  # {"type":"object","properties":{...},"required":[...],...}

Defaults are filled in; unknown members are refused (a typo should not pass silently).

Rules every declaration gets, whatever else it says (issue 36): a string is text both storage engines
hold as it was given — no NUL (PostgreSQL text cannot store one) and no lone surrogate (no UTF-8 can
encode one); an integer fits in 64 signed bits (PostgreSQL's bigint, SQLite's INTEGER, orjson); a number
is finite. A value that breaks one is refused with `Invalid` naming the field, before anything stores
or serialises it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .errors import Invalid

_MISSING = object()


INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # what every integer param fits in, whatever its own bounds


def text_problem(value: str) -> str | None:
    """Why `value` is no text both engines hold faithfully (the one text rule), or None."""
    if "\x00" in value:
        return "must not contain NUL (U+0000) characters"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"must be valid Unicode text: a lone surrogate U+{ord(value[exc.start]):04X} at {exc.start}"
    return None


def _shown_number(value: int | float) -> str:
    """A number as a message quotes it: a huge integer by its size (str() of one past 4,300 digits raises)."""
    if isinstance(value, int) and not -(10**30) < value < 10**30:
        return f"an integer of {value.bit_length()} bits"
    return repr(value)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def type_name(value: Any) -> str:
    """The JSON name of a value's type, as errors say it ("null", "integer", "object", …)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class Field:
    json_type = ""

    def __init__(self, *, default: Any = _MISSING, optional: bool = False, description: str = ""):
        self.default = default
        self.optional = optional or default is not _MISSING
        self.description = description

    def validate(self, value: Any, path: str) -> Any:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.json_type}
        if self.default is not _MISSING and self.default is not None:
            out["default"] = self.default
        if self.description:
            out["description"] = self.description
        return out

    def _wrong_type(self, value: Any, path: str) -> Invalid:
        return Invalid(f"must be {self.json_type_phrase}, got {type_name(value)}", field=path)

    @property
    def json_type_phrase(self) -> str:
        return {
            "string": "a string",
            "integer": "an integer",
            "number": "a number",
            "boolean": "a boolean",
            "array": "an array",
            "object": "an object",
        }[self.json_type]


class Str(Field):
    json_type = "string"

    def __init__(
        self,
        min_len: int = 0,
        max_len: int | None = None,
        *,
        pattern: str | None = None,
        choices: tuple[str, ...] | None = None,
        **kw: Any,
    ):
        super().__init__(**kw)
        self.min_len, self.max_len, self.choices = min_len, max_len, choices
        self.pattern = pattern
        self._re = re.compile(pattern) if pattern else None

    def validate(self, value: Any, path: str) -> Any:
        if not isinstance(value, str):
            raise self._wrong_type(value, path)
        if self.choices is not None and value not in self.choices:
            raise Invalid(f"must be one of {', '.join(map(repr, self.choices))}", field=path)
        if len(value) < self.min_len:
            rule = "must not be empty" if self.min_len == 1 else f"must be at least {self.min_len} characters"
            raise Invalid(rule, field=path)
        if self.max_len is not None and len(value) > self.max_len:
            raise Invalid(f"must be at most {self.max_len} characters, got {len(value)}", field=path)
        if self._re is not None and not self._re.fullmatch(value):
            raise Invalid(f"must match {self.pattern}", field=path)
        problem = text_problem(value)
        if problem:
            raise Invalid(problem, field=path)
        return value

    def schema(self) -> dict[str, Any]:
        out = super().schema()
        if self.min_len:
            out["minLength"] = self.min_len
        if self.max_len is not None:
            out["maxLength"] = self.max_len
        if self.pattern:
            out["pattern"] = f"^{self.pattern}$"
        if self.choices is not None:
            out["enum"] = list(self.choices)
        return out


class Int(Field):
    json_type = "integer"

    def __init__(self, minimum: int | None = None, maximum: int | None = None, **kw: Any):
        super().__init__(**kw)
        self.minimum, self.maximum = minimum, maximum

    def _check(self, value: Any, path: str) -> Any:
        low = INT_MIN if self.minimum is None else self.minimum
        high = INT_MAX if self.maximum is None else self.maximum
        if not value >= low:
            raise Invalid(f"must be >= {low}, got {_shown_number(value)}", field=path)
        if not value <= high:
            raise Invalid(f"must be <= {high}, got {_shown_number(value)}", field=path)
        return value

    def validate(self, value: Any, path: str) -> Any:
        if isinstance(value, float) and value.is_integer():  # 2.0; and 1e19, which the bounds then refuse
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong_type(value, path)
        return self._check(value, path)

    def schema(self) -> dict[str, Any]:
        out = super().schema()
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return out


class Num(Int):
    json_type = "number"

    def validate(self, value: Any, path: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._wrong_type(value, path)
        if isinstance(value, float) and not math.isfinite(value):
            raise Invalid(f"must be a finite number, got {value}", field=path)
        if isinstance(value, int):
            self._check(value, path)  # bounds first: float() of a huge integer raises
        return self._check(float(value), path)


class Bool(Field):
    json_type = "boolean"

    def validate(self, value: Any, path: str) -> Any:
        if not isinstance(value, bool):
            raise self._wrong_type(value, path)
        return value


class Arr(Field):
    json_type = "array"

    def __init__(
        self, items: Field, min_items: int = 0, max_items: int | None = None, *, unique: bool = False, **kw: Any
    ):
        super().__init__(**kw)
        self.items, self.min_items, self.max_items, self.unique = items, min_items, max_items, unique

    def validate(self, value: Any, path: str) -> Any:
        if not isinstance(value, list):
            raise self._wrong_type(value, path)
        if len(value) < self.min_items:
            raise Invalid(f"must have at least {self.min_items} item(s)", field=path)
        if self.max_items is not None and len(value) > self.max_items:
            raise Invalid(f"must have at most {self.max_items} items", field=path)
        out = [self.items.validate(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if self.unique and len({repr(v) for v in out}) != len(out):
            raise Invalid("items must be unique", field=path)
        return out

    def schema(self) -> dict[str, Any]:
        out = super().schema()
        out["items"] = self.items.schema()
        if self.min_items:
            out["minItems"] = self.min_items
        if self.max_items is not None:
            out["maxItems"] = self.max_items
        if self.unique:
            out["uniqueItems"] = True
        return out


class Obj(Field):
    json_type = "object"

    def __init__(self, _fields: dict[str, Field] | None = None, **fields: Field):
        super().__init__()
        self.fields: dict[str, Field] = {**(_fields or {}), **fields}

    def validate(self, value: Any, path: str = "") -> dict[str, Any]:
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise Invalid(f"must be an object, got {type_name(value)}", field=path)
        self.refuse_unknown(value, path)
        out: dict[str, Any] = {}
        for name, spec in self.fields.items():
            sub = _join(path, name)
            if name in value and not (value[name] is None and spec.optional):
                out[name] = spec.validate(value[name], sub)
            elif not spec.optional:
                raise Invalid("required", field=sub)
            else:
                out[name] = None if spec.default is _MISSING else spec.default
        return out

    def refuse_unknown(self, value: dict[str, Any], path: str = "") -> None:
        """Invalid naming the first member of `value` that is none of the fields."""
        unknown = [k for k in value if k not in self.fields]
        if unknown:
            allowed = ", ".join(self.fields) or "none"
            raise Invalid(f"unknown parameter (allowed: {allowed})", field=_join(path, unknown[0]))

    def schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {k: f.schema() for k, f in self.fields.items()},
            "required": [k for k, f in self.fields.items() if not f.optional],
            "additionalProperties": False,
        }

    def json_schema(self) -> dict[str, Any]:
        return self.schema()


# Both name a file or folder: a name of dots only ("." / "..") would step out of its directory.
SESSION_KEY = r"(?!\.+$)[A-Za-z0-9._:-]{1,128}"  # ":" for prefixes like "hook:"
AGENT_ID = r"(?!\.+$)[A-Za-z0-9._-]{1,64}"
