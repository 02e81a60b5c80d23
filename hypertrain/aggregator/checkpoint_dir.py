"""A checkpoint's directory on disk, made from its stored files (issue 16).

The daemon keeps every checkpoint it publishes as ``<state_dir>/checkpoints/<run_id>/<w>/``
holding exactly ``FILES`` (:mod:`.checkpoint`), so an operator can point ``hypertrain
verify-checkpoint``, ``sample`` or ``export`` at it, or copy it away. :func:`write_checkpoint_dir`
fills a fresh sibling directory with hard links to the object-store files (a copy where the
file system refuses a link), fsyncs it and swaps it into place; a directory already there (a
provisional checkpoint rebuilt or made final) is moved aside first and removed after, so the
path never holds a mix of two checkpoints. A crash can leave the path missing (never half
written): the caller writes the directory before it records the checkpoint, so a restarted
daemon writes it again. The links share the store's files: edit a copy, never these.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path

from hypertrain.aggregator.checkpoint import FILES
from hypertrain.store.objects import fsync_dir

__all__ = ["checkpoint_dir", "write_checkpoint_dir"]


def checkpoint_dir(state_dir: Path, run_id: str, w: int) -> Path:
    """``<state_dir>/checkpoints/<run_id>/<w>``."""
    return state_dir / "checkpoints" / run_id / str(w)


def _place(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
        with target.open("rb") as f:
            os.fsync(f.fileno())


def write_checkpoint_dir(target: Path, files: Mapping[str, Path]) -> None:
    """Make ``target`` hold exactly ``files`` (name -> stored file), swapped in whole."""
    if sorted(files) != sorted(FILES):
        raise ValueError(f"a checkpoint directory holds exactly {', '.join(FILES)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    fresh = target.parent / f".{target.name}.new-{secrets.token_hex(4)}"
    fresh.mkdir(mode=0o755)
    try:
        for name, source in files.items():
            _place(source, fresh / name)
        fsync_dir(fresh)
        old = None
        if target.exists():
            old = target.parent / f".{target.name}.old-{secrets.token_hex(4)}"
            target.rename(old)
        fresh.rename(target)
        fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
