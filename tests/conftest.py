"""Shared fixtures: one runtime on the present OpenCL device for the whole session.

CLFORGE_DEVICE selects the device (a substring of its platform or device name), as everywhere.
"""

from __future__ import annotations

import pytest

from generator import registry as registry_mod
from generator.registry import Registry


@pytest.fixture(scope="session")
def registry() -> Registry:
    return registry_mod.default()


@pytest.fixture(scope="session")
def runtime(registry: Registry):
    from generator.progcache import ProgramCache
    from generator.runtime import Runtime

    return Runtime(reg=registry, cache=ProgramCache(None))
