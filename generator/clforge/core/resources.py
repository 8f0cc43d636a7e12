"""Where clforge's own files are: found through the installed package, never by walking up
from a source file.

- In a wheel (`pip install clforge`): the generated package is `clforge.generated` and the
  built-in tree's data (specs, templates, tuning files, device profiles) is `clforge/data/`.
- In a source checkout, installed editable (`pip install -e .`, as `make` does): setuptools maps
  `clforge.generated` onto the checkout's `generated/`, and the tree is the checkout around it
  (the folder that holds `specs/`, `templates/`, `tuning/`, `profiles/` and `clforge.yaml`).

The tuning files a user makes (`clforge tune` on an installed clforge) never go into
site-packages: they go to the user's tuning folder, `$CLFORGE_TUNING_PATH` (the first of its
folders) or `~/.cache/clforge/tuning/`, which the parameter lookup reads before the shipped files.
"""

from __future__ import annotations

import os
from functools import cache
from importlib import resources
from pathlib import Path

from clforge.errors import ClforgeError

TUNING_ENV = "CLFORGE_TUNING_PATH"
TUNING_SWITCH_ENV = "CLFORGE_TUNING"  # "off": the lookup reads no tuning file
_SWITCH = {"": True, "on": True, "1": True, "off": False, "0": False}


@cache
def generated_dir() -> Path:
    """The folder of the generated package `clforge.generated` (registry.py, ops.py, kernels/)."""
    try:
        return _folder(resources.files("clforge.generated"))
    except ModuleNotFoundError:
        raise ClforgeError(
            "clforge.generated cannot be imported: install clforge (`pip install clforge`, or "
            "`pip install -e .` in a checkout) rather than putting its source on PYTHONPATH"
        ) from None


@cache
def builtin_root() -> Path:
    """The folder of clforge's own tree: its specs/, templates/, tuning/ and profiles/."""
    data = resources.files("clforge") / "data"
    if data.is_dir():
        return _folder(data)
    return generated_dir().parent


def installed() -> bool:
    """Whether clforge's own tree is an installed wheel's (read-only data) rather than a source
    checkout (where `clforge generate` and `clforge tune` write into the tree)."""
    return (resources.files("clforge") / "data").is_dir()


def user_tuning_folders() -> tuple[Path, ...]:
    """The user's tuning folders, read before the shipped files: `$CLFORGE_TUNING_PATH`
    (folders separated by `os.pathsep`), else `~/.cache/clforge/tuning/`."""
    value = os.environ.get(TUNING_ENV, "")
    named = tuple(Path(p).expanduser() for p in value.split(os.pathsep) if p.strip())
    return named or (Path.home() / ".cache" / "clforge" / "tuning",)


def tuning_on() -> bool:
    """Whether the parameter lookup reads tuning files: `$CLFORGE_TUNING` unset, empty, `on` or
    `1`; `off` or `0` hides every one of them (computed defaults only). Another value is an
    error, not a silent `on`: a run meant to measure the defaults must not measure tuned ones."""
    value = os.environ.get(TUNING_SWITCH_ENV, "").strip().lower()
    if value not in _SWITCH:
        raise ClforgeError(
            f"${TUNING_SWITCH_ENV}={value!r}: expected on or off (off: no tuning file is read)"
        )
    return _SWITCH[value]


def _folder(t: resources.abc.Traversable) -> Path:
    path = Path(str(t))
    if not path.is_dir():
        raise ClforgeError(
            f"clforge's data is not on the file system ({t}); install clforge unzipped"
        )
    return path
