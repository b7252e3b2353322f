"""Every setting that is an endpoint's URL (config.HTTP_URL_SETTINGS) is an http(s) URL with a host, or
the gateway does not start: 'chat.baseUrl = "127.0.0.1:11434"' used to start and then fail every reply as
'unreachable, retryable' (issue 35)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import HTTP_URL_SETTINGS, ConfigError, load_config

BAD = [
    "127.0.0.1:11434",
    "localhost:11434/v1",
    "ftp://host/v1",
    "http://",
    "https://:80/v1",
    "http://a b/v1",
    "http://host:99999/v1",
    "//host/v1",
]
GOOD = ["http://127.0.0.1:11434/v1", "https://api.openai.com/v1", "http://[::1]:8080/v1", "HTTP://Example.com/v1"]


@pytest.mark.parametrize("key", HTTP_URL_SETTINGS)
@pytest.mark.parametrize("url", BAD)
def test_a_url_setting_that_no_client_can_call_is_refused_naming_the_key(key, url):
    with pytest.raises(ConfigError) as err:
        load_config({key: url}, env={})
    assert str(err.value).startswith(f"{key}: "), err.value


@pytest.mark.parametrize("key", HTTP_URL_SETTINGS)
@pytest.mark.parametrize("url", GOOD)
def test_http_urls_with_a_host_are_taken(key, url):
    load_config({key: url}, env={})


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.sampled_from(HTTP_URL_SETTINGS), st.text(min_size=1, max_size=60).filter(lambda t: "\x00" not in t))
def test_any_text_is_either_a_callable_url_or_refused_naming_the_key(key, text):
    try:
        cfg = load_config({key: text}, env={})
    except ConfigError as exc:
        assert str(exc).startswith(f"{key}: ") or "\n" in str(exc), exc
        return
    value = cfg.chat.base_url if key == "chat.baseUrl" else cfg.memory.embeddings.base_url
    assert value.lower().startswith(("http://", "https://"))
