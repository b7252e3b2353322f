"""gateway/memory/secrets.py: secrets said in a conversation are masked; what only looks like one is not.

The corpus is a table: every secret format with the part that must vanish, and look-alikes that must
come out unchanged. The secrets are assembled from pieces so that no scanner takes this file for a leak.
Hypothesis then puts them into random text: masked wherever they stand, the words around them kept,
and masking twice changes nothing."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.memory.secrets import _RULES, _found, _rules_hinted, find, mask, mask_json

A36 = "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC2dF4gH6"  # 36 letters and digits, as many token bodies are
HEX32 = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
HEX64 = HEX32 * 2
B64 = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"

# (what is said, the secret in it that must not survive)
SECRETS: list[tuple[str, str]] = [
    ("my key is {s} keep it safe", "sk-" + "proj-" + "Xy7" + A36),
    ("use {s} for the API", "sk-" + A36 + "T3Blbk"),
    ("claude key {s}", "sk-" + "ant-api03-" + A36 + "_xYz-9"),
    ("aws id {s} in us-east-1", "AKIA" + "IOSFODNN7EXAMPLE"),
    ("token {s} for the repo", "ghp" + "_" + A36),
    ("fine-grained {s}", "github" + "_pat_" + "11ABCDEFG0" + A36 + "_" + A36),
    ("gitlab {s}", "glpat" + "-" + "x9Yz8Wv7Ut6Sr5Qp4On3"),
    ("slack bot {s}", "xoxb" + "-" + "123456789012-1234567890123-" + A36[:24]),
    ("post to {s} daily", "https://hooks.slack.com/services/" + "T00000000/B00000000/" + A36[:24]),
    ("stripe {s}", "sk" + "_live_" + A36[:24]),
    ("maps {s}", "AIza" + "Sy" + A36[:33]),
    ("oauth {s}", "GOCSPX" + "-" + A36[:28]),
    ("session jwt {s} expires", "eyJ" + "hbGciOiJIUzI1NiJ9.eyJ" + "zdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N"),
    ("sendgrid {s}", "SG" + "." + A36[:22] + "." + A36 + "xyz1234"),
    ("npm {s}", "npm" + "_" + A36),
    ("pypi {s}", "pypi" + "-AgEIcHlwaS5vcmc" + A36 + A36),
    ("hf {s}", "hf" + "_" + A36[:34]),
    ("telegram {s}", "1234567890:" + "AA" + A36[:33]),
    ("twilio {s}", "SK" + HEX32),
    ("mailgun {s}", "key" + "-" + HEX32),
    ("shopify {s}", "shpat" + "_" + HEX32),
    ("droplet {s}", "dop" + "_v1_" + HEX64),
    ("age {s}", "AGE-SECRET-KEY-1" + "QYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQY"),
    ("groq {s}", "gsk" + "_" + A36 + "abcdef"),
    ("notion {s}", "ntn" + "_" + A36 + "abcdefgh"),
    ("curl -H 'Authorization: Bearer {s}' https://api", "Zx81kq02LmN7pQ93rSt4"),
    ("Authorization: Basic {s}", "dXNlcjpodW50ZXIyIQ=="),
    ("postgresql://jarvis:{s}@db.local/jarvis", "S3cr3t-Pa55"),
    ("my password is {s}", "hunter2"),
    ("The wifi password for the cabin is {s}.", "Tr0ub4dor&3"),
    ('the vault passphrase is "{s}"', "correct horse battery staple"),
    ("my PIN is {s}", "4821"),
    ("password: {s}", "correcthorsebatterystaple"),
    ("DB_PASSWORD={s}", "plainwords"),
    ("OPENAI_API_KEY={s}", "k3y" + "W1thD1g1ts00"),
    ('"client_secret": "{s}"', "cs" + "_" + "9f8e7d6c5b4a3210"),
    ("aws_secret_access_key = {s}", "wJalrXUtnFEMI" + "/K7MDENG/bPxRfiCYEXAMPLEKEY"),
]

PRIVATE_KEY = "-----BEGIN RSA PRIVATE KEY-----\n" + B64 + "\n" + B64[::-1] + "\n-----END RSA PRIVATE KEY-----"
OPENSSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + B64 + "\n-----END OPENSSH PRIVATE KEY-----"
PGP_KEY = "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n" + B64 + "\n=abcd\n-----END PGP PRIVATE KEY BLOCK-----"

# What must come out exactly as it went in.
LOOKALIKES: list[str] = [
    "fixed in commit 3f9a1c2e8b7d6f5a4c3b2a1f0e9d8c7b6a5f4e3d on main",
    "see a1b2c3d for the revert",
    "request id 550e8400-e29b-41d4-a716-446655440000",
    "Order #114-3941689-8772232 shipped",
    "image sha256:" + HEX64,
    "md5 d41d8cd98f00b204e9800998ecf8427e",
    "call me on +1 (415) 555-0132",
    "the printer is at 192.168.1.10 and fe80::1ff:fe23:4567:890a",
    "mac 00:1A:2B:3C:4D:5E",
    "upgrade to v2.14.3-rc.1 tomorrow",
    "ISBN 978-3-16-148410-0",
    "UPS 1Z999AA10123456784 arrives Friday",
    "https://example.com/path?page=2&sort=asc#top",
    "write to jane.doe@example.com",
    "I forgot my password yesterday and had to reset it",
    "the password is on the sticky note",
    "password is required for this form",
    "Password: ******** (hidden)",
    "I hate being the bearer of bad news",
    "set max_tokens=4096 and temperature=0.2",
    "the tokenizer: unicode61 remove_diacritics 2",
    "scikit-learn and sk-learn are the same",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl jane@laptop",
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ\n-----END CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----\n" + B64 + "\n-----END PUBLIC KEY-----",
    "ticket PROJ-1234 and JIRA-99",
    "color #1e90ff",
    "meeting at 2026-11-22T10:00:00.000Z",
    "booking ref X7K9QP, flight BA2490",
    "IBAN DE89 3704 0044 0532 0130 00",
    "api_key = os.environ['OPENAI_API_KEY']",
    "Authorization: Bearer <token>",
    "Authorization: Bearer $JARVIS_TOKEN",
    "pod web-7d4b9c8f6-x2x9z restarted",
    "git clone ssh://git@github.com/jane/boat.git",
    "token count was 1532 today",
    "the secret is that she loves sailing",
    "AKIA is how AWS key ids start",
    "C:\\Users\\jane\\token.txt",
    "I made 3 ghp-style jokes",
]


@pytest.mark.parametrize("said, secret", SECRETS, ids=[s.split("{s}")[0].strip()[:24] or "start" for s, _ in SECRETS])
def test_each_secret_format_is_masked_and_the_rest_kept(said, secret):
    text = said.format(s=secret)
    out = mask(text)
    before, _, after = said.partition("{s}")
    assert re.fullmatch(re.escape(before) + r"\[redacted: [A-Za-z ]+\]" + re.escape(after), out), out


@pytest.mark.parametrize("block", [PRIVATE_KEY, OPENSSH_KEY, PGP_KEY], ids=["rsa", "openssh", "pgp"])
def test_a_private_key_block_goes_whole_and_so_does_its_tail(block):
    out = mask(f"here is my key:\n{block}\nthanks")
    assert out == "here is my key:\n[redacted: private key]\nthanks"
    tail = block.split("\n", 1)[1]  # a snippet that starts after the BEGIN line
    assert B64 not in mask("…" + tail) and "[redacted: private key]" in mask(tail)


@pytest.mark.parametrize("text", LOOKALIKES, ids=range(len(LOOKALIKES)))
def test_lookalikes_are_left_as_they_are(text):
    assert find(text) == [] and mask(text) == text


def test_the_corpus_is_as_big_as_promised():
    assert len(SECRETS) + 3 >= 20 and len(LOOKALIKES) >= 20


def test_a_mask_names_the_kind_and_json_is_masked_inside():
    assert mask("key AKIA" + "IOSFODNN7EXAMPLE") == "key [redacted: AWS access key]"
    value = {"results": [{"snippet": "my password is hunter2", "score": 0.5}], "n": 1, "password": "x"}
    assert mask_json(value) == {
        "results": [{"snippet": "my password is [redacted: password]", "score": 0.5}],
        "n": 1,
        "password": "x",
    }


words = st.text(alphabet=string.ascii_letters + " ,.", min_size=0, max_size=60)


@settings(max_examples=150, deadline=None)
@given(before=words, after=words, pick=st.integers(0, len(SECRETS) - 1))
def test_a_secret_anywhere_in_prose_is_masked_and_the_prose_kept(before, after, pick):
    said, secret = SECRETS[pick]
    core = said.format(s=secret)
    text = f"{before} {core} {after}"
    out = mask(text)
    assert secret not in out
    assert out.startswith(before) and out.endswith(after)


@settings(max_examples=150, deadline=None)
@given(
    parts=st.lists(st.sampled_from(LOOKALIKES) | words, min_size=1, max_size=6), sep=st.sampled_from([" ", "\n", ". "])
)
def test_lookalikes_mixed_with_prose_are_never_masked(parts, sep):
    text = sep.join(parts)
    assert mask(text) == text


@settings(max_examples=150, deadline=None)
@given(parts=st.lists(st.sampled_from([s.format(s=v) for s, v in SECRETS] + LOOKALIKES) | words, max_size=6))
def test_masking_twice_changes_nothing(parts):
    once = mask(" ".join(parts))
    assert mask(once) == once


A40 = "a1B2c3D4e5" * 4
# One of each format SECRETS has no sentence for (test_every_match_of_a_rule_holds_one_of_its_hints).
MORE_TOKENS = [
    f"hook https://discord.com/api/webhooks/123456789/{A40[:24]} here",
    f"whsec_{A40[:30]}",
    f"ya29.{A40[:24]}",
    f"xai-{A40}",
    f"r8_{A40[:32]}",
    f"pplx-{A40}",
    f"lin_api_{A40[:36]}",
    f"sq0atp-{A40[:24]}",
    f"ATATT3{A40}{A40[:12]}",
    f"dp.pt.{A40}",
]
HINTS = sorted({v for rule in _RULES for h in rule.hints for v in (h, h.lower(), h.upper())})


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(
        st.sampled_from(HINTS) | st.sampled_from([s.format(s=v) for s, v in SECRETS] + LOOKALIKES) | words,
        max_size=8,
    ),
    sep=st.sampled_from(["", " ", "\n", "-", "_", "."]),
)
def test_the_rules_tried_are_exactly_those_whose_hints_the_text_holds(parts, sep):
    """The rules are picked by their hints in groups (issue 46: asking each rule in turn was most of a
    sync's masking); the pick is the rules a hint of which the text contains (a case-sensitive rule's as
    it is spelt, another's in the lowered text), in their order, whatever the text."""
    text = sep.join(parts)
    lower = text.lower()
    assert _rules_hinted(text, lower) == [r for r in _RULES if any(h in (text if r.cased else lower) for h in r.hints)]


@pytest.mark.parametrize("rule", _RULES, ids=[f"{i}-{r.kind}" for i, r in enumerate(_RULES)])
def test_every_match_of_a_rule_holds_one_of_its_hints(rule):
    """Why skipping a rule whose hints are absent never loses a secret: each match holds a hint (as it is
    spelt for a case-sensitive rule), over every secret and lookalike of the corpus, in prose."""
    texts = [s.format(s=v) for s, v in SECRETS] + LOOKALIKES + [PRIVATE_KEY, OPENSSH_KEY, PGP_KEY] + MORE_TOKENS
    matched = 0
    for text in texts + [t.upper() for t in texts] + [t.lower() for t in texts]:
        for m in rule.pattern.finditer(text):
            matched += 1
            got = m.group(0)
            assert any(h in (got if rule.cased else got.lower()) for h in rule.hints), (rule.kind, got)
    assert matched, f"no text of the corpus is a {rule.kind}"


@settings(max_examples=400, deadline=None)
@given(
    parts=st.lists(
        st.sampled_from(HINTS)
        | st.sampled_from([s.format(s=v) for s, v in SECRETS] + LOOKALIKES)
        | st.sampled_from([s.format(s=v).upper() for s, v in SECRETS] + MORE_TOKENS)
        | words,
        max_size=8,
    ),
    sep=st.sampled_from(["", " ", "\n", "-", "_", ".", ": ", "="]),
)
def test_what_the_hints_skip_finds_nothing(parts, sep):
    """find (the rules its hints name) finds exactly what every rule tried on the text finds."""
    text = sep.join(parts)
    if len(text) >= 8:
        assert find(text) == _found(text, list(_RULES))
