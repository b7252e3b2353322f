"""Secrets said in a conversation, found and masked: pure, no I/O, no gateway imports.

    mask("my key is sk-proj-4f…")      → "my key is [redacted: OpenAI API key]"
    find(text)                         → [Found(kind, start, end), …] in text order
    mask_json(obj)                     → obj with every string in it masked (dicts, lists, tuples)

What counts (`memory.redactSecrets`, docs/memory.md "Secrets"): API keys and tokens of known formats
(each by its documented prefix and length, so a commit hash, a UUID or an order number never is one),
private-key blocks, bearer and basic credentials, passwords in URLs, and passwords, PINs and secrets
given a name (`password: …`, `my PIN is 4821`, `API_KEY=…`). A named value is masked only when it
looks like one: after `password:` any word but a few placeholders; after "my password is" a word with
a digit, a symbol or mixed case, or anything quoted; after `token=` / `secret:` a value of 12 or more
characters with letters and digits. The transcript keeps what the user said; this shapes what memory
holds and hands on (the index, recall into prompts, the memory tools, MCP).

A mask names the kind and nothing of the value, and is never found again: `mask(mask(t)) == mask(t)`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

VERSION = 1  # bump when what is found changes: indexes holding masked text are rebuilt (memory/signature.py)
MASK = "[redacted: {}]"
_MASKED = re.compile(r"\[redacted: [^\]\n]{1,40}\]")


@dataclass(frozen=True)
class Found:
    kind: str
    start: int
    end: int


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    hints: tuple[str, ...]  # text one of which a match contains: the rule runs only then
    group: int = 0  # the part of a match that is the secret (0: all of it)
    check: Callable[[str, bool], bool] | None = None  # (value, quoted) → whether it is one
    named: bool = False  # a value after a name (_VALUE's groups), not the match itself
    cased: bool = False  # the pattern is case-sensitive: its hints, as they are in it, are looked for in the
    # text as it is (not "sk" in "ask" for "SK…"); else they are lower-case, looked for in the lowered text


_WORD_END = r"(?![A-Za-z0-9_-])"
_WORD_START = r"(?<![A-Za-z0-9_-])"


def _token(kind: str, body: str, *hints: str) -> _Rule:
    """A token known by its prefix: the whole match, standing alone (not inside a longer word). Its hints
    are as the (case-sensitive) pattern spells them."""
    return _Rule(kind, re.compile(_WORD_START + body + _WORD_END), hints, cased=True)


# Private keys: a whole block, and the tail of one cut before its BEGIN line (a snippet, a chunk).
_KEY_LABEL = r"[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?"
_PRIVATE_BLOCK = re.compile(rf"-----BEGIN {_KEY_LABEL}-----[\s\S]*?(?:-----END {_KEY_LABEL}-----|\Z)")
_PRIVATE_TAIL = re.compile(rf"[A-Za-z0-9+/=]{{8,}}[ \t]*\r?\n(?:[A-Za-z0-9+/=]*[ \t]*\r?\n)*-----END {_KEY_LABEL}-----")

_PLACEHOLDERS = {
    "required",
    "optional",
    "none",
    "null",
    "nil",
    "empty",
    "unknown",
    "unset",
    "changed",
    "reset",
    "hidden",
    "redacted",
    "same",
    "secret",
    "password",
    "true",
    "false",
    "yes",
    "no",
    "here",
    "there",
    "below",
    "above",
    "ok",
    "fine",
    "wrong",
    "correct",
    "incorrect",
    "expired",
    "invalid",
    "weak",
    "strong",
}


def _placeholder(value: str) -> bool:
    v = value.lower()
    return (
        v in _PLACEHOLDERS
        or v.startswith(("$", "%", "{{", "<", "*", "…", "...", "[redacted"))
        or set(v) <= set("*x•.-_")
    )


def _after_colon(value: str, quoted: bool) -> bool:
    """`password: VALUE`: anything but a placeholder."""
    return quoted or not _placeholder(value)


def _after_is(value: str, quoted: bool) -> bool:
    """ "my password is VALUE": quoted, or a word that is no plain word (a digit, a symbol, mixed case)."""
    if quoted:
        return not _placeholder(value)
    if _placeholder(value):
        return False
    rest = value[1:]
    return (
        any(c.isdigit() for c in value)
        or any(not c.isalnum() for c in value)
        or (any(c.isupper() for c in rest) and any(c.islower() for c in value))
    )


def _random_looking(value: str, quoted: bool) -> bool:
    """`token=VALUE`: 12+ characters, letters and digits both, not a placeholder."""
    return (
        len(value) >= 12
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
        and not _placeholder(value)
    )


# A value after a name: quoted (any text up to the quote), or a run of characters up to a space, a
# quote or a separator; trailing sentence punctuation is not part of it.
_VALUE = (
    r"""(?:"(?P<dq>[^"\n]{1,200})"|'(?P<sq>[^'\n]{1,200})'|[“‘](?P<cq>[^”’\n]{1,200})[”’]|"""
    r"""(?P<bare>[^\s"'`,;()\[\]{}<>]{1,200}))"""
)
_PASSWORD_WORD = r"(?:pass(?:word|phrase|code)s?|passwd|pwd|pin(?: code| number)?)"
_PASSWORD_NAME = re.compile(r"(?i)pass(?:word|phrase|code)|passwd|pwd|(?:^|[_.-])pin(?:$|[_.-])|^pin")
_SECRET_NAME = re.compile(
    r"(?i)api[_-]?key|apikey|secret|token|access[_-]?key|private[_-]?key|auth[_-]?key|credential|"
    r"signing[_-]?key|session[_-]?key"
)
_PASSWORD_HINTS = ("pass", "pwd", "pin")

_NAMED: list[_Rule] = [
    # NAME=…, "name": "…", name: …  (an assignment, in config or code or a sentence): a password's name
    # takes any value but a placeholder (_after_colon), a secret's a random-looking one (_random_looking).
    _Rule(
        "assignment",
        re.compile(rf"(?<![A-Za-z0-9_.-])(?P<name>[A-Za-z0-9_.-]{{2,80}}+)[\"']?[ \t]*+(?:[:=]|=>|:=)[ \t]*+{_VALUE}"),
        (":", "="),
        named=True,
    ),
    # "my password (for the bank) is …", "the wifi passcode was …", "PIN is now …"
    _Rule(
        "password",
        re.compile(
            rf"(?i)(?<![A-Za-z0-9]){_PASSWORD_WORD}(?: (?:for|to|of|on|at) [^\n.:=!?]{{1,40}}?)?"
            rf"\s+(?:is|was|are|=)(?: (?:now|still|just|actually))?\s+{_VALUE}"
        ),
        _PASSWORD_HINTS,
        check=_after_is,
        named=True,
    ),
]


def _assigned(name: str, value: str, quoted: bool) -> str | None:
    """The kind of secret `name = value` holds, or None."""
    if _PASSWORD_NAME.search(name):
        return "password" if _after_colon(value, quoted) else None
    if _SECRET_NAME.search(name):
        return "secret" if _random_looking(value, quoted) else None
    return None


_RULES: list[_Rule] = [
    _Rule("private key", _PRIVATE_BLOCK, ("PRIVATE KEY",), cased=True),
    _Rule("private key", _PRIVATE_TAIL, ("PRIVATE KEY",), cased=True),
    _token("Anthropic API key", r"sk-ant-(?:api|admin|oat)\d{2}-[A-Za-z0-9_-]{20,}", "sk-ant-"),
    _token("OpenAI API key", r"sk-(?:proj-|svcacct-|admin-|None-)?(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{20,}", "sk-"),
    _token("AWS access key", r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}", "AKIA", "ASIA", "ABIA", "ACCA"),
    _token("GitHub token", r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}", "ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    _token("GitHub token", r"github_pat_[A-Za-z0-9_]{40,}", "github_pat_"),
    _token(
        "GitLab token",
        r"gl(?:pat|dt|ptt|rt|cbt|oas)-[A-Za-z0-9_-]{20,}",
        "glpat-",
        "gldt-",
        "glptt-",
        "glrt-",
        "glcbt-",
        "gloas-",
    ),
    _token("Slack token", r"xox[abposre]-[A-Za-z0-9-]{10,}", "xox"),
    _Rule(
        "Slack webhook",
        re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]{20,}"),
        ("hooks.slack.com",),
    ),
    _Rule(
        "Discord webhook",
        re.compile(r"https://(?:\w+\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]{20,}"),
        ("/api/webhooks/",),
    ),
    _token("Stripe key", r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}", "_live_", "_test_"),
    _token("Stripe webhook secret", r"whsec_[A-Za-z0-9]{24,}", "whsec_"),
    _token("Google API key", r"AIza[0-9A-Za-z_-]{35}", "AIza"),
    _token("Google OAuth secret", r"GOCSPX-[A-Za-z0-9_-]{20,}", "GOCSPX-"),
    _token("Google OAuth token", r"ya29\.[0-9A-Za-z_-]{20,}", "ya29."),
    _token("JSON web token", r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", "eyJ"),
    _token("SendGrid key", r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}", "SG."),
    _token("npm token", r"npm_[A-Za-z0-9]{36}", "npm_"),
    _token("PyPI token", r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{20,}", "pypi-"),
    _token("Hugging Face token", r"hf_[A-Za-z0-9]{30,}", "hf_"),
    _token("Telegram bot token", r"\d{8,10}:AA[A-Za-z0-9_-]{33}", ":AA"),
    _token("Twilio key", r"SK[0-9a-f]{32}", "SK"),
    _token("Mailgun key", r"key-[0-9a-z]{32}", "key-"),
    _token("Shopify token", r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}", "shp"),
    _token("DigitalOcean token", r"do[opr]_v1_[a-f0-9]{64}", "_v1_"),
    _token("age secret key", r"AGE-SECRET-KEY-1[0-9A-Z]{58}", "AGE-SECRET-KEY-"),
    _token("Groq API key", r"gsk_[A-Za-z0-9]{40,}", "gsk_"),
    _token("xAI API key", r"xai-[A-Za-z0-9]{40,}", "xai-"),
    _token("Replicate token", r"r8_[A-Za-z0-9]{30,}", "r8_"),
    _token("Perplexity API key", r"pplx-[A-Za-z0-9]{40,}", "pplx-"),
    _token("Linear API key", r"lin_api_[A-Za-z0-9]{32,}", "lin_api_"),
    _token("Notion token", r"(?:secret|ntn)_[A-Za-z0-9]{40,}", "secret_", "ntn_"),
    _token("Square token", r"sq0(?:atp|csp)-[A-Za-z0-9_-]{22,}", "sq0"),
    _token("Atlassian token", r"ATATT3[A-Za-z0-9_=-]{50,}", "ATATT3"),
    _token("Doppler token", r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}", "dp."),
    # Credentials in a header or a URL: the credential only.
    _Rule(
        "bearer token",
        re.compile(r"(?i)(?<![A-Za-z0-9])bearer\s+([A-Za-z0-9._~+/-]{16,}=*)" + _WORD_END),
        ("bearer",),
        group=1,
        check=lambda v, q: any(c.isdigit() for c in v) or len(v) >= 32,
    ),
    _Rule(
        "basic credentials",
        re.compile(r"(?i)authorization\s*[:=]\s*[\"']?basic\s+([A-Za-z0-9+/]{12,}=*)"),
        ("basic",),
        group=1,
    ),
    _Rule(
        "URL password",
        re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^/\s:@]{1,100}:([^/\s@]{1,200})@"),
        ("://",),
        group=1,
    ),
    *_NAMED,
]


# The rules to try, found from their hints at once: a hint is looked for only when one character of it
# that is not a lower-case letter or digit (if it has one) is in the text, and each hint is looked for
# once however many rules name it. (Asking each rule's hints in turn cost ~30 µs a message: most of a
# sync's masking, issue 46.) A case-sensitive rule's hints are looked for in the text as it is: "AKIA",
# "SK", "AIza" are rarer than "akia", "sk" ("ask", "desk") and "aiza" in lowered prose, so its regex
# runs less often, and a hint with a capital is passed over at once in text without that capital.
def _hint_groups(rules: list[_Rule]) -> list[tuple[str, bool, list[tuple[str, tuple[int, ...]]]]]:
    where: dict[tuple[str, bool], list[int]] = {}
    for i, rule in enumerate(rules):
        for h in rule.hints:
            where.setdefault((h, rule.cased), []).append(i)
    groups: dict[tuple[str, bool], list[tuple[str, tuple[int, ...]]]] = {}
    for (h, cased), idx in where.items():
        key = next((c for c in h if not (c.isdigit() or (c.isalpha() and c.islower()))), "")
        groups.setdefault((key, cased), []).append((h, tuple(idx)))
    return [(key, cased, hints) for (key, cased), hints in sorted(groups.items())]


_HINT_GROUPS = _hint_groups(_RULES)


def _rules_hinted(text: str, lower: str) -> list[_Rule]:
    """The rules one of whose hints `text` contains (a case-sensitive rule's) or `lower`, the lowered
    text, contains (another's), in _RULES order (the first to claim a span keeps it)."""
    hit: set[int] = set()
    for key, cased, hints in _HINT_GROUPS:
        where = text if cased else lower
        if key and key not in where:
            continue
        for h, idx in hints:
            if h in where:
                hit.update(idx)
    return [_RULES[i] for i in sorted(hit)]


def _value_of(m: re.Match[str]) -> tuple[str, int, int, bool]:
    """A named rule's value: (text, start, end, quoted)."""
    for name, quoted in (("dq", True), ("sq", True), ("cq", True), ("bare", False)):
        if m.group(name) is not None:
            start, end = m.span(name)
            text = m.group(name)
            if not quoted:  # sentence punctuation after a bare value is the sentence's
                stripped = text.rstrip(".,;:!?")
                end -= len(text) - len(stripped)
                text = stripped
            return text, start, end, quoted
    raise AssertionError("a named rule without a value")  # pragma: no cover - every _VALUE has one


def find(text: str) -> list[Found]:
    """Every secret in `text`, in order, none overlapping (the first rule to claim a span keeps it)."""
    if len(text) < 8:
        return []
    rules = _rules_hinted(text, text.lower())
    return _found(text, rules) if rules else []


def _found(text: str, rules: list[_Rule]) -> list[Found]:
    """What these rules find in `text` (find: the rules its hints name)."""
    taken = [(m.start(), m.end()) for m in _MASKED.finditer(text)]
    found: list[Found] = []

    def free(start: int, end: int) -> bool:
        return all(end <= a or start >= b for a, b in taken)

    for rule in rules:
        for m in rule.pattern.finditer(text):
            kind = rule.kind
            if rule.named:
                value, start, end, quoted = _value_of(m)
                if not value:
                    continue
                if kind == "assignment":
                    kind = _assigned(m.group("name"), value, quoted) or ""
                    if not kind:
                        continue
                elif rule.check is not None and not rule.check(value, quoted):
                    continue
            else:
                start, end = m.span(rule.group)
                if rule.check is not None and not rule.check(m.group(rule.group), False):
                    continue
            if end > start and free(start, end):
                taken.append((start, end))
                found.append(Found(kind, start, end))
    found.sort(key=lambda f: f.start)
    return found


def mask(text: str) -> str:
    """`text` with every secret replaced by `[redacted: <kind>]`."""
    found = find(text)
    if not found:
        return text
    out, at = [], 0
    for f in found:
        out.append(text[at : f.start])
        out.append(MASK.format(f.kind))
        at = f.end
    out.append(text[at:])
    return "".join(out)


def mask_json(value: Any) -> Any:
    """`value` with every string in it masked (dict keys are left alone)."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {k: mask_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(mask_json(v) for v in value)
    return value
