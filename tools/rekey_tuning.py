"""Re-key tuning entries that a template change left stale but did not change.

A tuning entry is keyed by its instance's schema hash, which covers every template the instance
is rendered from (shared macros included), so a change to a shared template makes every entry
stale even where no kernel changed. This script renders each stale entry's own parameter set
from the templates of an earlier revision (a temporary git worktree) and from the working tree;
where the two sources are identical but for comments and blank lines, the entry is the same
measurement of the same kernel and gets the new key. Entries whose kernel did change stay stale
(re-tune them, or `clforge tune --prune` them for a device not at hand).

    python tools/rekey_tuning.py HEAD          # before committing a template change
    python tools/rekey_tuning.py abc1234 --dry-run
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from clforge.core.tree import DEFAULT, Tree
from clforge.emit.render import Renderer
from clforge.params.database import load, schema_hash
from clforge.registry import loader
from clforge.registry.loader import Registry
from clforge.registry.records import Instance

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def _source(reg: Registry, renderer: Renderer, inst: Instance, params: tuple) -> str:
    """The kernel source of `inst` with `params`, its comments and blank lines left out: a
    change to a comment is no change to the kernel the entry measured."""
    text = renderer.render(dataclasses.replace(inst, params=params), reg.op(inst.op), inst.template)
    lines = (ln.rstrip() for ln in _COMMENT.sub("", text).splitlines())
    return "\n".join(ln for ln in lines if ln)


def rekey(old_root: Path, *, dry_run: bool) -> dict[str, int]:
    old_tree = Tree(old_root)
    old_reg, new_reg = loader.load(old_tree), loader.load(DEFAULT)
    old_r, new_r = Renderer(old_tree), Renderer(DEFAULT)
    counts = {"current": 0, "rekeyed": 0, "changed": 0, "unknown": 0}
    for path in sorted(DEFAULT.tuning.glob("*.yaml")):
        tf = load(path)
        out = []
        for e in tf.entries:
            new = new_reg.instances.get(e.instance)
            old = old_reg.instances.get(e.instance)
            kept = e
            if new is not None and e.sha == schema_hash(new):
                counts["current"] += 1
            elif new is None or old is None or e.sha != schema_hash(old):
                counts["unknown"] += 1  # stale before this change too: left as it is
            elif _source(old_reg, old_r, old, e.params) == _source(new_reg, new_r, new, e.params):
                kept = dataclasses.replace(e, sha=schema_hash(new))
                counts["rekeyed"] += 1
            else:
                counts["changed"] += 1
            out.append(kept)
        if not dry_run:
            dataclasses.replace(tf, entries=tuple(out)).save(path)
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("rev", help="the revision whose templates the entries were keyed by")
    ap.add_argument("--dry-run", action="store_true", help="count, write nothing")
    args = ap.parse_args()
    root = DEFAULT.root
    with tempfile.TemporaryDirectory(prefix="clforge-rekey-") as tmp:
        old = Path(tmp) / "old"
        subprocess.run(
            ["git", "-C", str(root), "worktree", "add", "--detach", str(old), args.rev],
            check=True,
            capture_output=True,
        )
        try:
            counts = rekey(old, dry_run=args.dry_run)
        finally:
            subprocess.run(
                ["git", "-C", str(root), "worktree", "remove", "--force", str(old)], check=False
            )
    print(", ".join(f"{v} {k}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
