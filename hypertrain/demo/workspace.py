"""The demo's files: secrets and keys, the dataset and the run manifest (plain, synchronous).

Layout of a demo directory (a fresh temporary one, or ``--keep DIR``)::

    secrets/          0700: internal_token, admin_token, worker_token, coord.key, owner.key
    state/            the daemon's CHALLENGE_STATE_DIR (challenge.db, objects/, its local chain)
    dataset/          built from the default corpus (the standard library's sources)
    miners/<name>/    miner.key, miner.toml, work/
    daemon.out, daemon.log, miners/<name>/stdout.txt, stderr.txt

:func:`create_workspace` makes the directories and every secret; :func:`build_dataset` builds
the dataset; :func:`demo_manifest` is the CPU test-mode manifest of ``hypertrain manifest
example`` over that dataset and the daemon's chain, with the DiLoCo settings bench/parity.py
measured (:mod:`hypertrain.demo.tuning`: ``H``, the outer lr, ``preclip_norm`` and
``cclip_tau``), the windows the demo sized from its measured training round
(:mod:`hypertrain.demo.windows`: ``assign_after_open`` and ``upload_after_commit``; without
them, the test-mode manifest's), and ledger settings short enough that escrow vests within the
demo: epochs of :data:`EPOCH_SECONDS`, vesting after :data:`VEST_ROUNDS` ledger rounds (so
``q_base`` :data:`Q_BASE`: ``E_vest_rounds >= ceil(1/q_base)``), the daemon's
settings and the manifest's agreeing.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import attrs

from hypertrain.beacon.chain import ChainInfo
from hypertrain.datasets import BuildOptions, DatasetManifest, build
from hypertrain.datasets.sources import stdlib_sources
from hypertrain.demo.tuning import tuned
from hypertrain.demo.windows import Windows
from hypertrain.protocol.f32 import f32_hex
from hypertrain.protocol.keys import Keypair, write_seed_file
from hypertrain.protocol.manifest import Beacon, RunManifest
from hypertrain.protocol.testmode import build_test_mode_manifest
from hypertrain.trainer.params import init_state_hash

__all__ = [
    "DATASET_BYTES",
    "EPOCH_SECONDS",
    "Q_BASE",
    "TOKEN_NAMES",
    "VEST_ROUNDS",
    "MinerHome",
    "Workspace",
    "build_dataset",
    "create_workspace",
    "demo_manifest",
]

TOKEN_NAMES: Final = ("internal", "admin", "worker")
DATASET_BYTES: Final = 1 << 20
"""Source bytes of the demo dataset (about 14k samples of 64 tokens; builds in about a second)."""
EPOCH_SECONDS: Final = 5
"""The demo ledger's chain epoch (``HYPERTRAIN_EPOCH_SECONDS``; production: 4320)."""
VEST_ROUNDS: Final = 2
"""Ledger rounds from finality to payable (``HYPERTRAIN_VEST_ROUNDS`` = ``E_vest_rounds``)."""
Q_BASE: Final = 0.5
"""The demo's base audit rate: the smallest with ``ceil(1 / q_base) <= VEST_ROUNDS``."""


@attrs.frozen
class MinerHome:
    """One demo miner's directory and key."""

    name: str
    home: Path
    key: Keypair

    @property
    def config(self) -> Path:
        return self.home / "miner.toml"

    @property
    def stdout(self) -> Path:
        return self.home / "stdout.txt"

    @property
    def stderr(self) -> Path:
        return self.home / "stderr.txt"


@attrs.frozen
class Workspace:
    """The demo directory's paths and the generated keys (module doc)."""

    root: Path
    owner: Keypair
    coord: Keypair
    admin_token: str

    @property
    def secrets(self) -> Path:
        return self.root / "secrets"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def dataset(self) -> Path:
        return self.root / "dataset"

    @property
    def daemon_out(self) -> Path:
        return self.root / "daemon.out"

    @property
    def daemon_log(self) -> Path:
        return self.root / "daemon.log"

    def daemon_env(self) -> dict[str, str]:
        """The daemon's settings as the operator guide's environment variables."""
        env = {
            f"CHALLENGE_{name.upper()}_TOKEN_FILE": str(self.secrets / f"{name}_token")
            for name in TOKEN_NAMES
        }
        return env | {
            "CHALLENGE_STATE_DIR": str(self.state),
            "HYPERTRAIN_COORD_KEY_FILE": str(self.secrets / "coord.key"),
            "HYPERTRAIN_OWNER_HOTKEY": self.owner.ss58,
            "HYPERTRAIN_HOLDOUT_DIR": str(self.dataset),
            "HYPERTRAIN_EPOCH_SECONDS": str(EPOCH_SECONDS),
            "HYPERTRAIN_VEST_ROUNDS": str(VEST_ROUNDS),
            "HYPERTRAIN_DATASET_NAME": "python-stdlib",
            "HYPERTRAIN_DATASET_LICENSE": "PSF-2.0",
            "HYPERTRAIN_DATASET_ATTRIBUTION": "The Python standard library's sources, "
            "Python Software Foundation",
        }

    @property
    def internal_token(self) -> str:
        """The internal token (``get_weights``)."""
        return (self.secrets / "internal_token").read_text().strip()

    def add_auditor(self, index: int) -> MinerHome:
        """Create auditor ``index``'s home: a fresh key (its data cache lives there too)."""
        key = Keypair.generate()
        name = f"auditor-{index}"
        home = self.root / "auditors" / name
        home.mkdir(parents=True)
        write_seed_file(home / "auditor.key", key.seed)
        return MinerHome(name, home, key)

    @property
    def worker_token_file(self) -> Path:
        return self.secrets / "worker_token"

    def add_miner(self, index: int, api: str, run_id: str, name: str = "") -> MinerHome:
        """Create miner ``index``'s home (named ``name``, default ``miner-{index}``): a fresh
        key and a miner.toml for ``run_id``."""
        key = Keypair.generate()
        name = name or f"miner-{index}"
        home = self.root / "miners" / name
        home.mkdir(parents=True)
        write_seed_file(home / "miner.key", key.seed)
        home.joinpath("miner.toml").write_text(
            f'api = "{api}"\nkeyfile = "miner.key"\nworkdir = "work"\n'
            f'run_id = "{run_id}"\nowner_hotkey = "{self.owner.ss58}"\npoll_seconds = 0.5\n',
            encoding="utf-8",
        )
        return MinerHome(name, home, key)


def _write_secret(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o600)


def create_workspace(root: Path) -> Workspace:
    """Make ``root`` (new or empty) into a demo directory with fresh secrets and keys."""
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise FileExistsError(f"{root} is not empty")
    secret_dir = root / "secrets"
    secret_dir.mkdir(mode=0o700)
    tokens = {name: secrets.token_hex(32) for name in TOKEN_NAMES}
    for name, token in tokens.items():
        _write_secret(secret_dir / f"{name}_token", token + "\n")
    owner, coord = Keypair.generate(), Keypair.generate()
    write_seed_file(secret_dir / "owner.key", owner.seed)
    write_seed_file(secret_dir / "coord.key", coord.seed)
    (root / "state").mkdir()
    return Workspace(root, owner, coord, tokens["admin"])


def build_dataset(workspace: Workspace, seq_len: int) -> DatasetManifest:
    """Build the demo dataset from the standard library's sources (about a second)."""
    return build(
        BuildOptions(
            sources=tuple(stdlib_sources()),
            out=workspace.dataset,
            seq_len=seq_len,
            max_bytes=DATASET_BYTES,
        )
    )


def demo_manifest(
    workspace: Workspace,
    chain: ChainInfo,
    dataset: DatasetManifest,
    auditors: Sequence[str] = (),
    windows: Windows | None = None,
) -> RunManifest:
    """The test-mode manifest over ``dataset`` and the daemon's ``chain`` (module doc), naming
    ``auditors`` (SS58) as the run's auditors, with the timeouts of ``windows`` (None: the
    test-mode manifest's)."""
    beacon = Beacon(
        chain_hash=chain.hash,
        period=chain.period_ms // 1000,
        genesis_time=chain.genesis_ms // 1000,
    )
    manifest, _ = build_test_mode_manifest(
        coord_pubkey=workspace.coord.ss58, beacon=beacon, dataset=dataset.dataset_spec()
    )
    manifest = tuned(manifest)
    timeouts = manifest.verify.T
    if windows is not None:
        timeouts = attrs.evolve(
            timeouts,
            assign_after_open=windows.assign_after_open,
            upload_after_commit=windows.upload_after_commit,
        )
    verify = attrs.evolve(
        manifest.verify, T=timeouts, q_base=f32_hex(Q_BASE), E_vest_rounds=VEST_ROUNDS
    )
    return attrs.evolve(
        manifest,
        verify=verify,
        init_state_hash=init_state_hash(manifest.model),
        auditors=tuple(auditors),
    )
