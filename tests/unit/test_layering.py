"""The layers of the memory index, held at the level of packages (test_import_cycles.py sees modules only).

memory/ thinks and storage/ stores: the memory feature declares the ports an engine implements
(memory/ports.py) and imports nothing of storage/, each engine's memory package keeps to itself, and the
one pipeline and the one searcher are never subclassed. Every import counts, as in test_import_cycles.py:
at the top, deferred inside a function, or under `if TYPE_CHECKING:`."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from tests.unit.test_import_cycles import ROOT, _imports, _modules

# What the memory feature and the engines may not import: the doors, and what sits above the services.
ABOVE = (
    "gateway.app",
    "gateway.cli",
    "gateway.doors",
    "gateway.dispatcher",
    "gateway.calls",
    "gateway.methods",
    "gateway.registry",
    "gateway.tools",
    "gateway.chat",
    "gateway.portability",
)

# Modules of gateway/ past ~450 lines, each one concern: named here, so a new one (or one that grew) is a
# decision.
ONE_CONCERN: dict[str, str] = {}
MAX_LINES = 450
# Issue 44: at most three modules past MAX_LINES, none past CEILING (a long one is a decision, not a habit).
MAX_LONG, CEILING = 3, 650


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _under(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _offending(graph: dict[str, set[str]], importer: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{m} → {d}"
        for m, deps in graph.items()
        if _under(m, importer)
        for d in deps
        if _under(d, *forbidden) and not _under(d, importer)
    )


def test_the_graph_sees_the_packages(graph):
    assert graph["gateway.storage.files.memory.store"] and graph["gateway.memory.index.pipeline"]
    # Every name the rules forbid is a module or package that exists (a renamed one would forbid nothing).
    assert [p for p in ABOVE if not any(_under(m, p) for m in graph)] == []
    assert _offending({"gateway.memory.x": {"gateway.storage.base"}}, "gateway.memory", ("gateway.storage",)) == [
        "gateway.memory.x → gateway.storage.base"
    ]


def test_memory_never_imports_storage(graph):
    assert _offending(graph, "gateway.memory", ("gateway.storage",)) == []


def test_memory_and_storage_never_import_the_doors(graph):
    for package in ("gateway.memory", "gateway.storage"):
        assert _offending(graph, package, ABOVE) == [], package
    # Nor what composes them: the memory service and the cluster are put together above the engines
    # (gateway/compose.py), which only store.
    for package in ("gateway.memory", "gateway.storage"):
        assert _offending(graph, package, ("gateway.services", "gateway.cluster", "gateway.compose")) == [], package
    assert not [e for e in _offending(graph, "gateway.storage", ("gateway.memory.service",))], "an engine composes"


def test_the_index_lifecycle_is_memorys(graph):
    """An engine stores: what an index's life decides (its signature, the searcher's making) is the memory
    feature's (memory/index/lifecycle.py), which the engines' indexes hold and give their ports to (the files
    engine's rebuild-and-swap, rebuild.py, works on its index's lifecycle too)."""
    decided = ("gateway.memory.signature", "gateway.memory.search.searcher")
    assert _offending(graph, "gateway.storage", decided) == []
    lifecycle = {
        m for m, deps in graph.items() if "gateway.memory.index.lifecycle" in deps and _under(m, "gateway.storage")
    }
    assert lifecycle == {
        "gateway.storage.files.memory.index",
        "gateway.storage.files.memory.rebuild",
        "gateway.storage.postgres.memory.index",
    }
    # Held, not inherited: no engine's class builds on the lifecycle's (issue 44).
    for path in _modules().values():
        if "gateway/storage/" in path.as_posix():
            assert "(IndexLifecycle)" not in path.read_text(encoding="utf-8"), path


def _packages_imported(path) -> set[str]:
    """The top-level names of every package a module imports (at the top, deferred, or for types)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_database_driver_is_the_postgresql_engines_own():
    """asyncpg is imported inside storage/postgres only: the rest of the gateway (the migration tool too)
    names the driver's errors through the engine (its REFUSED and UNUSABLE)."""
    importers = {name for name, path in _modules().items() if "asyncpg" in _packages_imported(path)}
    assert importers, "the scan finds no importer of asyncpg at all: it no longer sees imports"
    assert sorted(m for m in importers if not _under(m, "gateway.storage.postgres")) == []


def test_each_engine_keeps_to_its_own_memory_package(graph):
    assert _offending(graph, "gateway.storage.files", ("gateway.storage.postgres",)) == []
    assert _offending(graph, "gateway.storage.postgres", ("gateway.storage.files",)) == []


def test_the_pipeline_and_the_searcher_are_never_subclassed():
    """One pipeline, one searcher: an engine gives ports, it does not override the algorithm. (And no class
    of the PostgreSQL engine derives from one of the files engine.)"""
    for name in _modules():
        if _under(name, "gateway.storage", "gateway.memory"):
            importlib.import_module(name)
    from gateway.memory.index.pipeline import IndexPipeline
    from gateway.memory.search.searcher import Searcher

    assert IndexPipeline.__subclasses__() == [] and Searcher.__subclasses__() == []
    for name in _modules():
        if not _under(name, "gateway.storage.postgres"):
            continue
        for cls in vars(importlib.import_module(name)).values():
            if inspect.isclass(cls) and cls.__module__ == name:
                foreign = [b.__module__ for b in cls.__mro__ if _under(b.__module__, "gateway.storage.files")]
                assert foreign == [], f"{name}.{cls.__name__} derives from {foreign}"


def test_modules_past_the_size_are_one_named_concern():
    long = {
        str(path.relative_to(ROOT.parent)): n
        for path in ROOT.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    unnamed = {path: n for path, n in long.items() if path not in ONE_CONCERN}
    assert unnamed == {}, f"past {MAX_LINES} lines: split by concern, or name its one concern in ONE_CONCERN"
    assert set(ONE_CONCERN) - set(long) == set(), "ONE_CONCERN names a module that is no longer long: drop it"
    assert len(long) <= MAX_LONG, f"more than {MAX_LONG} modules past {MAX_LINES} lines: {sorted(long)}"
    assert {path: n for path, n in long.items() if n > CEILING} == {}, f"past {CEILING} lines: split it"
