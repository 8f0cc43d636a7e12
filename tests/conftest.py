"""Shared fixtures: one runtime on the present OpenCL device for the whole session.

CLFORGE_DEVICE selects the device (a substring of its platform or device name), as everywhere.
Tests are hermetic: clforge's program cache lives in a temporary folder for the session (never
~/.cache/clforge). `pytest -m "not slow"` skips the slow tests for a quick loop.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _hermetic_cache(tmp_path_factory: pytest.TempPathFactory):
    """Point clforge's disk cache at a temporary folder; subprocesses inherit it."""
    old = os.environ.get("CLFORGE_CACHE_DIR")
    os.environ["CLFORGE_CACHE_DIR"] = str(tmp_path_factory.mktemp("clforge-cache"))
    yield
    if old is None:
        os.environ.pop("CLFORGE_CACHE_DIR", None)
    else:
        os.environ["CLFORGE_CACHE_DIR"] = old

from generator.registry import loader as registry_mod
from generator.registry.loader import Registry


@pytest.fixture(scope="session")
def registry() -> Registry:
    return registry_mod.default()


@pytest.fixture(scope="session")
def runtime(registry: Registry):
    from generator.runtime.launch import Runtime
    from generator.runtime.program_cache import ProgramCache

    return Runtime(reg=registry, cache=ProgramCache(None))


@pytest.fixture(scope="session")
def launcher(runtime):
    """A dispatcher over the session's runtime, for launching named instances."""
    from generator.call.dispatcher import Dispatcher

    return Dispatcher.for_runtime(runtime)
