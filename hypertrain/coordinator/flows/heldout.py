"""The held-out loss of each theta of a run (issue 7 item 4): what is owed, the store, the sum.

``theta(w)`` is the start weights of round ``w``: ``w = 0`` is the genesis
(:func:`~hypertrain.trainer.params.init_params` of the manifest's model), ``w >= 1`` the theta
the daemon made by merging round ``w - 1`` (``aggregations[w - 1].theta_start_sha256``, which
exists even when round ``w`` is never opened because ``w - 1`` was the last round).

- :func:`pending`: every ``theta(w)`` without a ``heldout_losses`` row, of the runs that have a
  registered dataset, ordered by run and ``w``;
- :func:`record_loss` (write-once: a row already present is left alone) and :func:`get_loss`;
- :func:`read_holdout`: the operator's private holdout, refused (:class:`DatasetError`, one
  line naming the problem) unless its ``manifest.json`` hashes to the run's registered
  manifest, the whole directory verifies including the holdout commitment (salt present), and
  its ``seq_len`` is the model's;
- :func:`heldout_loss`: the mean next-token cross-entropy of a theta over the holdout rows, in
  micro-batches; each batch's float32 mean is weighted by its size and summed in float64. It is
  a pure function of its inputs on one reference environment (not a consensus value).

No Trio here: :mod:`hypertrain.coordinator.services.heldout` runs these off the Trio thread.
Torch is imported by :func:`heldout_loss` only, when a loss is first computed: the daemon
imports this module for the round view, and without torch it starts (and restarts after a
crash) listening in about a second instead of three or four.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt
from attrs import frozen

from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.manifest import MANIFEST_FILE
from hypertrain.datasets.reader import Dataset
from hypertrain.datasets.verify import verify
from hypertrain.protocol.hashes import sha256_hex
from hypertrain.protocol.manifest import ModelSpec
from hypertrain.trainer.codec import F32Array

__all__ = [
    "HoldoutRows",
    "LossRow",
    "Pending",
    "get_loss",
    "get_loss_row",
    "heldout_loss",
    "pending",
    "read_holdout",
    "record_loss",
]

HoldoutRows = npt.NDArray[np.uint16]
"""``[n, seq_len + 1]`` token ids of the first holdout samples."""


@frozen
class Pending:
    """A theta whose held-out loss is not stored yet."""

    run_id: str
    w: int
    manifest_sha256: str
    """The run's registered dataset manifest (the holdout must belong to it)."""
    theta_sha256: str | None
    """The theta-only state blob of ``theta(w)``; None for the genesis (``w = 0``)."""
    theta_hash: str | None
    """``TH(theta(w))``; None for the genesis (the caller derives it from the init params)."""


@frozen
class LossRow:
    """One ``heldout_losses`` row."""

    theta_hash: str
    loss: float
    n_samples: int
    computed_round: int


def pending(conn: sqlite3.Connection) -> list[Pending]:
    """Every theta owed a loss (module doc), by run and ``w``."""
    genesis = conn.execute(
        "SELECT d.run_id, 0, d.manifest_sha256, NULL, NULL FROM run_datasets d"
        " LEFT JOIN heldout_losses h ON h.run_id = d.run_id AND h.w = 0"
        " WHERE h.run_id IS NULL"
    ).fetchall()
    merged = conn.execute(
        "SELECT a.run_id, a.w + 1, d.manifest_sha256, a.theta_start_sha256, a.theta_hash"
        " FROM aggregations a JOIN run_datasets d ON d.run_id = a.run_id"
        " LEFT JOIN heldout_losses h ON h.run_id = a.run_id AND h.w = a.w + 1"
        " WHERE h.run_id IS NULL"
    ).fetchall()
    items = [Pending(*row) for row in (*genesis, *merged)]
    return sorted(items, key=lambda p: (p.run_id, p.w))


def record_loss(
    conn: sqlite3.Connection,
    run_id: str,
    w: int,
    row: LossRow,
) -> bool:
    """Store the loss of ``theta(w)``; True if new (a row already present is left alone)."""
    cur = conn.execute(
        "INSERT OR IGNORE INTO heldout_losses"
        " (run_id, w, theta_hash, loss, n_samples, computed_round) VALUES (?, ?, ?, ?, ?, ?)",
        (run_id, w, row.theta_hash, row.loss, row.n_samples, row.computed_round),
    )
    return cur.rowcount == 1


def get_loss_row(conn: sqlite3.Connection, run_id: str, w: int) -> LossRow | None:
    """The stored loss row of ``theta(w)``, or None."""
    row = conn.execute(
        "SELECT theta_hash, loss, n_samples, computed_round FROM heldout_losses"
        " WHERE run_id = ? AND w = ?",
        (run_id, w),
    ).fetchone()
    return None if row is None else LossRow(*row)


def get_loss(conn: sqlite3.Connection, run_id: str, w: int) -> float | None:
    """The held-out loss of ``theta(w)``, or None until computed."""
    row = get_loss_row(conn, run_id, w)
    return None if row is None else row.loss


def read_holdout(
    directory: Path, registered_sha256: str, seq_len: int, n_samples: int, start: int = 0
) -> HoldoutRows:
    """The first ``n_samples`` (at most all) holdout rows of ``directory`` (module doc); with
    ``start``, the ``n_samples`` rows from sample ``start`` on, wrapping around the holdout's
    end (a rotated hidden window: :mod:`hypertrain.coordinator.flows.hiddenwindows`)."""
    try:
        manifest_sha = sha256_hex((directory / MANIFEST_FILE).read_bytes())
    except OSError as e:
        raise DatasetError(f"{directory / MANIFEST_FILE}: cannot read ({e.strerror})") from None
    if manifest_sha != registered_sha256:
        raise DatasetError(
            f"{directory}: {MANIFEST_FILE} has sha256 {manifest_sha}, the run's registered"
            f" dataset is {registered_sha256}"
        )
    report = verify(directory)
    if report.holdout != "commit":
        raise DatasetError(
            f"{directory}: the holdout cannot be checked against its commitment"
            f" (holdout {report.holdout}: holdout.json and holdout.salt are needed)"
        )
    holdout = Dataset.open(directory, split="holdout", verify=False)
    if holdout.seq_len != seq_len:
        raise DatasetError(
            f"{directory}: holdout seq_len {holdout.seq_len} is not the model's {seq_len}"
        )
    total = holdout.n_samples
    return holdout.samples([(start + i) % total for i in range(min(n_samples, total))])


def heldout_loss(
    model: ModelSpec, theta: Mapping[str, F32Array], rows: HoldoutRows, batch: int
) -> float:
    """Mean next-token cross-entropy of ``theta`` over ``rows``, ``batch`` rows at a time."""
    if batch < 1 or len(rows) == 0:
        raise ValueError(f"need batch >= 1 and rows, got batch {batch}, {len(rows)} rows")
    import torch  # here, not at the top: the round view imports this module, and a daemon

    from hypertrain.trainer.model import loss  # restarted after a crash listens seconds sooner

    params = {name: torch.from_numpy(np.asarray(value)) for name, value in theta.items()}
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(rows), batch):
            chunk = rows[start : start + batch]
            tokens = torch.from_numpy(chunk.astype(np.int64))
            total += float(loss(params, tokens, model)) * len(chunk)
    return total / len(rows)
