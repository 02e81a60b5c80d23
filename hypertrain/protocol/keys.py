"""ed25519 keys (pynacl), their SS58 addresses, and seed files on disk.

A seed file holds the 32-byte ed25519 seed either raw (32 bytes) or as 64 hex chars; ASCII
whitespace around the content is stripped first. It must be a regular file (not a symlink,
directory or fifo), owned by the current user, with no group or other permission bits
(``mode & 0o077 == 0``). Anything else is refused with :class:`KeyfileError` before a byte of it
is used, so a leaked or shared key is never silently accepted.

One exception, for systemd's ``LoadCredential=``: a file directly inside
``$CREDENTIALS_DIRECTORY`` (the directory itself, not a name it prefixes, not a subdirectory; the
file still never through a symlink) was put there by the service manager, which makes it 0400,
owned by root, and grants the service's user read access with a POSIX ACL entry: ``stat`` then
shows the ACL's mask as a group read bit (mode 0440) although no group can read it. There the
rule is: the file and the directory owned by root or by this user, no permission bits for
others, no group write bit, and no group execute bit on the file. The directory is private to
the service (systemd mounts it read-only for that unit alone), so nobody else can reach the key.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import nacl.exceptions
import nacl.signing

from hypertrain.protocol.errors import KeyfileError
from hypertrain.protocol.ss58 import ss58_encode

__all__ = [
    "Keypair",
    "PrivateFileKey",
    "load_keypair",
    "load_seed",
    "private_file_key",
    "read_private_file",
    "verify_signature",
    "write_seed_file",
]

_CREDENTIALS_ENV = "CREDENTIALS_DIRECTORY"
"""Set by systemd for a unit with ``LoadCredential=``: the directory of its credentials."""
_MAX_SEED_FILE = 4096
_WHITESPACE = b" \t\n\r\x0b\x0c"
_HEX = frozenset(b"0123456789abcdefABCDEF")


class Keypair:
    """An ed25519 signing key; ``ss58`` is its address and the signer name on the wire."""

    __slots__ = ("_signing", "public_key", "ss58")

    def __init__(self, signing_key: nacl.signing.SigningKey) -> None:
        self._signing = signing_key
        self.public_key: bytes = bytes(signing_key.verify_key)
        self.ss58: str = ss58_encode(self.public_key)

    @classmethod
    def from_seed(cls, seed: bytes) -> Keypair:
        if len(seed) != 32:
            raise KeyfileError(f"an ed25519 seed is 32 bytes, got {len(seed)}")
        return cls(nacl.signing.SigningKey(bytes(seed)))

    @classmethod
    def generate(cls) -> Keypair:
        return cls(nacl.signing.SigningKey.generate())

    @property
    def seed(self) -> bytes:
        return bytes(self._signing)

    @property
    def public_hex(self) -> str:
        return self.public_key.hex()

    def sign(self, message: bytes) -> bytes:
        """The 64-byte detached signature of ``message``."""
        return bytes(self._signing.sign(message).signature)

    def __repr__(self) -> str:
        return f"Keypair({self.ss58})"


def verify_signature(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """True iff ``signature`` is a valid ed25519 signature of ``message`` by ``public_key``."""
    if len(public_key) != 32 or len(signature) != 64:
        return False
    try:
        nacl.signing.VerifyKey(bytes(public_key)).verify(message, bytes(signature))
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.CryptoError, ValueError):
        return False
    return True


PrivateFileKey = tuple[int, int, int, int, int, int]


def private_file_key(st: os.stat_result) -> PrivateFileKey:
    """What a cache of a private file's content must compare: its content's identity and, so
    that a ``chmod`` or ``chown`` making it unsafe is noticed at once, its mode and owner."""
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_mode, st.st_uid)


def read_private_file(path: str | os.PathLike[str], limit: int, what: str = "key file") -> bytes:
    """The bytes of a file only its owner may read: a regular file (never through a symlink),
    owned by this user, with no group or other permission bits, at most ``limit`` bytes (or a
    systemd credential, module doc).

    :class:`FileNotFoundError` when it does not exist; :class:`KeyfileError` naming anything
    else wrong. Seed files, the compute node's ``node.json`` and the coordinator's token files
    are read with it.
    """
    path = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as e:
        if path.is_symlink():
            raise KeyfileError(
                f"{path}: cannot open a symlink; point at the {what} itself"
            ) from None
        raise KeyfileError(f"{path}: cannot open {what} ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyfileError(f"{path}: not a regular file")
        if _in_credentials_directory(path):
            _check_credential(path, st, what)
        else:
            _check_private(path, st)
        if st.st_size > limit:
            raise KeyfileError(f"{path}: {st.st_size} bytes is too large for a {what}")
        return os.read(fd, limit + 1)
    finally:
        os.close(fd)


def _check_private(path: Path, st: os.stat_result) -> None:
    """The ordinary rule: owned by this user, no group or other bits (module doc)."""
    if st.st_uid != os.getuid():
        raise KeyfileError(f"{path}: owned by uid {st.st_uid}, not by you ({os.getuid()})")
    if st.st_mode & 0o077:
        raise KeyfileError(
            f"{path}: mode {stat.S_IMODE(st.st_mode):04o} lets others read it; run chmod 600 {path}"
        )


def _in_credentials_directory(path: Path) -> bool:
    """True when ``path`` names a file directly inside ``$CREDENTIALS_DIRECTORY`` (module doc)."""
    directory = os.environ.get(_CREDENTIALS_ENV, "")
    if not os.path.isabs(directory):
        return False
    parent = os.path.dirname(os.path.abspath(path))
    return os.path.realpath(parent) == os.path.realpath(directory)


def _check_credential(path: Path, st: os.stat_result, what: str) -> None:
    """The rule for a file the service manager placed in the credentials directory (module doc)."""
    owners = {0, os.getuid()}
    if st.st_uid not in owners:
        raise KeyfileError(
            f"{path}: owned by uid {st.st_uid}, neither root nor you ({os.getuid()})"
        )
    if st.st_mode & 0o037:
        raise KeyfileError(
            f"{path}: mode {stat.S_IMODE(st.st_mode):04o} lets others read or change this "
            f"{what}; a credential is at most 0440 (systemd's own is 0400 plus an ACL)"
        )
    directory = path.absolute().parent
    dst = os.stat(directory)
    if dst.st_uid not in owners or dst.st_mode & 0o027:
        raise KeyfileError(
            f"{directory}: a credentials directory must be root's or yours and closed to others "
            f"(uid {dst.st_uid}, mode {stat.S_IMODE(dst.st_mode):04o})"
        )


def load_seed(path: str | os.PathLike[str]) -> bytes:
    """Read a seed file, refusing unsafe or malformed ones (see the module docstring)."""
    try:
        content = read_private_file(path, _MAX_SEED_FILE)
    except FileNotFoundError:
        raise KeyfileError(f"{path}: no such key file") from None
    if len(content) == 32:
        return content
    stripped = content.strip(_WHITESPACE)
    if len(stripped) == 64 and all(c in _HEX for c in stripped):
        return bytes.fromhex(stripped.decode("ascii"))
    raise KeyfileError(f"{path}: expected 32 raw bytes or 64 hex chars, found {len(content)} bytes")


def load_keypair(path: str | os.PathLike[str]) -> Keypair:
    """The keypair of a seed file (see :func:`load_seed`)."""
    return Keypair.from_seed(load_seed(path))


def write_seed_file(path: str | os.PathLike[str], seed: bytes) -> None:
    """Create ``path`` (mode 0600, never overwriting) holding the seed as 64 hex chars."""
    if len(seed) != 32:
        raise KeyfileError(f"an ed25519 seed is 32 bytes, got {len(seed)}")
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise KeyfileError(f"{path}: already exists; refusing to overwrite a key") from None
    except OSError as e:
        raise KeyfileError(f"{path}: cannot create key file ({e.strerror})") from None
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, seed.hex().encode("ascii") + b"\n")
        os.fsync(fd)
    except OSError as e:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise KeyfileError(f"{path}: cannot write key file ({e.strerror})") from None
    os.close(fd)
