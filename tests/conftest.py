"""Shared fixtures: one runtime on the present OpenCL device for the whole session.

CLFORGE_DEVICE selects the device (a substring of its platform or device name), as everywhere.
Tests are hermetic: clforge's program cache lives in a temporary folder per test process (never
~/.cache/clforge), and the user's tuning folder is an empty one. `pytest -m "not slow"` skips
the slow tests for a quick loop.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from clforge.registry import loader as registry_mod
from clforge.registry.loader import Registry

_CACHE_ENV = "CLFORGE_CACHE_DIR"
_PATH_ENV = "CLFORGE_PATH"
_TUNING_ENV = "CLFORGE_TUNING_PATH"
_saved: dict[str, str | None] = {}


def pytest_configure(config: pytest.Config) -> None:
    """Before any test module is imported: clforge's disk cache goes to a temporary folder
    (subprocesses inherit it), never to ~/.cache/clforge."""
    _saved[_CACHE_ENV] = os.environ.get(_CACHE_ENV)
    os.environ[_CACHE_ENV] = tempfile.mkdtemp(prefix="clforge-test-cache-")
    # the user's own tuning files (~/.cache/clforge/tuning) stay out: an empty folder instead
    _saved[_TUNING_ENV] = os.environ.get(_TUNING_ENV)
    os.environ[_TUNING_ENV] = str(Path(os.environ[_CACHE_ENV]) / "user-tuning")
    # extensions named by the caller's environment stay out; tests that want one set it
    _saved[_PATH_ENV] = os.environ.pop(_PATH_ENV, None)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(os.environ[_CACHE_ENV], ignore_errors=True)
    for name in (_CACHE_ENV, _PATH_ENV, _TUNING_ENV):
        old = _saved.get(name)
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@pytest.fixture(scope="session")
def registry() -> Registry:
    return registry_mod.default()


@pytest.fixture(scope="session")
def runtime(registry: Registry):
    from clforge.runtime.launch import Runtime
    from clforge.runtime.program_cache import ProgramCache

    return Runtime(reg=registry, cache=ProgramCache(None))


@pytest.fixture(scope="session")
def launcher(runtime):
    """A dispatcher over the session's runtime, for launching named instances."""
    from clforge.call.dispatcher import Dispatcher

    return Dispatcher.for_runtime(runtime)
