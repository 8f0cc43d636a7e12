"""Shared fixtures: one runtime on the present OpenCL device for the whole session.

CLFORGE_DEVICE selects the device (a substring of its platform or device name), as everywhere.
"""

from __future__ import annotations

import pytest

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
