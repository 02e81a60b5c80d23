"""The one error of :mod:`hypertrain.datasets`.

``DatasetError`` (a :class:`~hypertrain.protocol.errors.HypertrainError`) says what is wrong with
a corpus, a build directory or a manifest in one line that names the file (``shard-00003.u16:
sha256 ... != manifest ...``). The command line maps it to exit status 1 (invalid data).
"""

from __future__ import annotations

from hypertrain.protocol.errors import HypertrainError

__all__ = ["DatasetError"]


class DatasetError(HypertrainError):
    """A corpus, shard set or manifest that cannot be built, read or verified as it is."""
