"""Where clforge keeps its caches (program binaries, compiled templates, generation stamps):
$CLFORGE_CACHE_DIR, default ~/.cache/clforge; `CLFORGE_CACHE=0` turns every disk cache off."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path | None:
    """The cache folder (or a subfolder of it), or None when disk caches are off."""
    if os.environ.get("CLFORGE_CACHE", "1") == "0":
        return None
    base = os.environ.get("CLFORGE_CACHE_DIR") or Path.home() / ".cache" / "clforge"
    return Path(base).joinpath(*parts)
