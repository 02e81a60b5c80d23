"""Key files handed over by systemd's ``LoadCredential=`` (hypertrain.protocol.keys, module doc).

systemd writes a credential 0400, owned by root, and grants the service's user read access with
a POSIX ACL entry, which ``stat`` shows as mode 0440. These tests stand in for it with mode 0440
files in a directory named by ``$CREDENTIALS_DIRECTORY``; the ordinary rule still holds
everywhere else.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hypertrain.protocol.errors import KeyfileError
from hypertrain.protocol.keys import load_seed

SEED = bytes(range(32))


@pytest.fixture
def creds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "credentials"
    directory.mkdir()
    directory.chmod(0o750)  # 0700 plus the ACL mask r-x, as systemd leaves it
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(directory))
    return directory


def put(directory: Path, mode: int, name: str = "coord.key") -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_bytes(SEED.hex().encode())
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o440, 0o400, 0o600])
def test_a_credential_may_show_the_acl_mask_as_group_read(creds: Path, mode: int) -> None:
    assert load_seed(put(creds, mode)) == SEED


def test_the_same_file_elsewhere_is_refused(tmp_path: Path, creds: Path) -> None:
    for directory in (tmp_path / "other", creds / "sub", tmp_path / "credentials-evil"):
        with pytest.raises(KeyfileError, match="chmod 600"):
            load_seed(put(directory, 0o440))


def test_without_the_variable_the_ordinary_rule_holds(
    creds: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = put(creds, 0o440)
    monkeypatch.delenv("CREDENTIALS_DIRECTORY")
    with pytest.raises(KeyfileError, match="chmod 600"):
        load_seed(path)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", "credentials")  # relative: ignored
    with pytest.raises(KeyfileError, match="chmod 600"):
        load_seed(path)


@pytest.mark.parametrize("mode", [0o444, 0o404, 0o460, 0o450, 0o470])
def test_a_credential_open_to_others_or_writable_is_refused(creds: Path, mode: int) -> None:
    with pytest.raises(KeyfileError, match="at most 0440"):
        load_seed(put(creds, mode))


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o751])
def test_a_credentials_directory_open_to_others_is_refused(creds: Path, mode: int) -> None:
    path = put(creds, 0o440)
    creds.chmod(mode)
    with pytest.raises(KeyfileError, match="closed to others"):
        load_seed(path)


def test_a_symlink_in_the_credentials_directory_is_refused(tmp_path: Path, creds: Path) -> None:
    target = put(tmp_path / "elsewhere", 0o440)
    (creds / "coord.key").symlink_to(target)
    with pytest.raises(KeyfileError, match="symlink"):
        load_seed(creds / "coord.key")


def test_a_relative_path_into_the_credentials_directory_counts(
    creds: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(creds, 0o440)
    monkeypatch.chdir(creds)
    assert load_seed("coord.key") == SEED
