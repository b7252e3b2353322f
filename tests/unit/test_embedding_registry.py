"""Embedding providers register by name, the built-in ones as a plugin does (memory/embeddings/registry.py):
The config (config/memory.py) names a provider, the registry holds the names."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from gateway.config import ConfigError, load_config
from gateway.memory.embeddings import create_provider, registry
from tests.cli.test_config_cli import jarvis


@pytest.fixture
def clean_registry(monkeypatch):
    """The registry as a fresh process has it (the built-in providers), given back after the test."""
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    monkeypatch.setattr(registry, "_plugins_loaded", False)


def plugin(tmp_path, monkeypatch, body: str) -> None:
    """An installed distribution whose entry point in `jarvis_gateway.embeddings` is the module's hook."""
    (tmp_path / "jarvis_test_plugin.py").write_text(textwrap.dedent(body))
    info = tmp_path / "jarvis_test_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: jarvis-test-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[jarvis_gateway.embeddings]\ntest = jarvis_test_plugin:register_embedding_providers\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "jarvis_test_plugin", raising=False)


def test_the_built_in_providers_are_registered_like_any_other():
    names = list(registry.providers())
    assert names[:3] == ["local", "openai", "none"]
    assert all(p.description for p in registry.providers().values())


async def test_a_plugin_registers_a_provider_that_the_config_then_chooses(tmp_path, monkeypatch, clean_registry):
    plugin(
        tmp_path,
        monkeypatch,
        """
        import numpy as np
        from gateway.memory.embeddings import EmbeddingProvider

        class Ones(EmbeddingProvider):
            name, model, dims = "ones", "flat", 4

            async def embed(self, texts):
                return np.ones((len(texts), 4), dtype=np.float32) / 2

        def register_embedding_providers(register):
            register("ones", lambda config: Ones(), "every text the same")
        """,
    )
    cfg = load_config({"stateDir": str(tmp_path / "state"), "memory.embeddings.provider": "ones"}, env={})
    provider, problem = create_provider(cfg)
    assert problem is None and provider.name == "ones" and provider.signature_dims == 4
    assert np.allclose(await provider.embed(["a"]), 0.5)
    assert list(registry.providers()) == ["local", "openai", "none", "ones"]


def test_a_broken_plugin_leaves_the_others_usable(tmp_path, monkeypatch, clean_registry):
    plugin(tmp_path, monkeypatch, "def register_embedding_providers(register):\n    raise RuntimeError('no GPU')\n")
    assert list(registry.providers()) == ["local", "openai", "none"]


def test_names_are_checked_and_never_taken_twice(clean_registry):
    def factory(config):
        raise AssertionError("not made")

    for bad in ("", "Local", "has space", "x" * 33, "1st"):
        with pytest.raises(ValueError, match="lowercase letters"):
            registry.register(bad, factory)
    registry.register("mine", factory)
    registry.register("mine", factory)  # the same again: nothing to decide
    with pytest.raises(ValueError, match="'local' is registered already"):
        registry.register("local", factory)


@pytest.mark.parametrize("key", ["provider", "fallback"])
def test_a_name_no_provider_has_is_a_config_error_naming_the_key(tmp_path, key):
    cfg = load_config({"stateDir": str(tmp_path), f"memory.embeddings.{key}": "magic"}, env={})
    want = f"memory.embeddings.{key}: must be one of local, openai, none; got 'magic'"
    with pytest.raises(ConfigError, match=want):
        create_provider(cfg)  # not a silent fallback
    (tmp_path / "config.toml").write_text(f"[memory.embeddings]\n{key} = 'magic'\n")
    for command in (["serve"], ["config"]):
        r = jarvis(*command, state_dir=tmp_path)
        assert r.returncode == 2 and want in r.stderr, (command, r.stderr)


def test_jarvis_config_lists_the_registered_providers_as_the_choices(tmp_path):
    import orjson

    r = jarvis("config", "--defaults", "--json", state_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    keys = orjson.loads(r.stdout)
    assert keys["memory.embeddings.provider"]["choices"] == ["local", "openai", "none"]
    assert keys["memory.embeddings.fallback"]["choices"] == ["local", "openai", "none"]
