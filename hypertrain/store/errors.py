"""Errors raised by the store: our own failures, and refusals of what a peer uploads.

The store reuses the protocol tree for what a peer causes and adds a small branch for what can
only be our own fault (a 500-class condition, never mapped to a peer's 4xx)::

    HypertrainError
    ├── StoreError                  our storage is unusable or inconsistent (never a peer's fault)
    │   ├── MigrationError          bad migration files, a failed migration, an unknown schema
    │   │   └── SchemaTooNew        the database records a version newer than this code knows
    │   └── CorruptObject           an object on disk no longer hashes to its key (never served)
    └── ProtocolError               (hypertrain.protocol.errors)
        ├── Malformed        400    an object key that is not 64 lowercase hex characters
        ├── NotFound         404    no object under that key
        ├── PayloadTooLarge  413    an upload over its size cap (refused as soon as it is over)
        └── ContractMismatch 422
            └── ContentMismatch     uploaded bytes whose sha256 or size differ from the declared

``trio.Cancelled`` and programming errors (``TypeError`` for an async fn given to the DB runner,
``RuntimeError`` for a read fn that changes rows) are outside this tree on purpose.
"""

from __future__ import annotations

from hypertrain.protocol.errors import ContractMismatch, HypertrainError

__all__ = [
    "ContentMismatch",
    "CorruptObject",
    "MigrationError",
    "SchemaTooNew",
    "StoreError",
]


class StoreError(HypertrainError):
    """Our own storage failed or is inconsistent; callers answer 500 and alert the operator."""


class MigrationError(StoreError):
    """Migration files are invalid (gap, duplicate, bad name) or applying one failed."""


class SchemaTooNew(MigrationError):
    """The database was migrated by newer code; this code refuses to touch it."""


class CorruptObject(StoreError):
    """A stored object's content does not hash to its key; it is reported, never served."""


class ContentMismatch(ContractMismatch):
    """Uploaded content whose sha256 or size differs from what the uploader declared."""

    status = 422
