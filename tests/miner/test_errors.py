"""The miner's one error tree: every error of the program under MinerError, drawn in the errors
module's docstring, mapped to its exit status at the process boundary, causes kept."""

from __future__ import annotations

import importlib
import inspect
import io
import pkgutil
from pathlib import Path

import httpx
import pytest
import trio

import hypertrain.miner
from hypertrain.miner import errors
from hypertrain.miner.config import MinerConfig
from hypertrain.miner.errors import (
    ApiError,
    DataFetchError,
    MinerError,
    MinerFatal,
    MinerProtocolError,
    StartStateError,
)
from hypertrain.miner.main import _classify
from hypertrain.miner.progress import Progress
from hypertrain.miner.session import run_miner
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from tests.miner.fake import API, FakeCoordinator


def _miner_exceptions() -> list[type[BaseException]]:
    found = []
    for info in pkgutil.iter_modules(hypertrain.miner.__path__):
        if info.name == "__main__":
            continue
        module = importlib.import_module(f"hypertrain.miner.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                found.append(obj)
    return found


@pytest.mark.usefixtures("configured")  # the walk imports the torch modules too
def test_every_miner_error_is_under_the_one_root_and_drawn_in_its_tree() -> None:
    found = _miner_exceptions()
    # the nine of errors.py, round's _Abort, auditserve's _Retry, disputesteps' Later, GiveUp
    assert len(found) == 13
    doc = errors.__doc__ or ""
    for cls in found:
        assert issubclass(cls, MinerError), cls
        assert f" {cls.__name__} " in doc or f".{cls.__name__} " in doc, cls
    assert issubclass(MinerProtocolError, MinerFatal)
    assert issubclass(StartStateError, MinerFatal)


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (MinerProtocolError("round 0: Receipt does not verify"), 2, "{e}"),
        (StartStateError("round 1: start state TH a != b"), 2, "{e}"),
        (MinerFatal("data_dir d: no such file"), 2, "{e}"),
        (ApiError("GET", "/v1/runs", 503, {"detail": "busy"}), 1, "ApiError: {e}"),
        (httpx.ConnectError("refused"), 1, "ConnectError: {e}"),
    ],
)
def test_the_process_boundary_maps_each_error_to_its_exit_status(
    error: Exception, code: int, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _classify(ExceptionGroup("miner", [error])) == code
    assert capsys.readouterr().err == f"hypertrain-miner: {line.format(e=error)}\n"


async def test_a_dataset_failure_is_a_protocol_error_with_its_causes_attached(
    run_manifest: RunManifest,
    coord: Keypair,
    owner: Keypair,
    miner_key: Keypair,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeCoordinator(run_manifest, coord, owner, [miner_key.ss58])  # no dataset registered
    config = MinerConfig(api=API, keyfile=tmp_path / "k", workdir=tmp_path / "w")
    with pytest.raises(MinerProtocolError, match=r"round 0: dataset: .* no dataset to fetch") as e:
        await run_miner(
            config, miner_key, start=0, transport=fake.transport(),
            progress=Progress(io.StringIO()), configure=lambda env: None,
        )  # fmt: skip
    fetch = e.value.__cause__
    assert isinstance(fetch, DataFetchError)
    assert isinstance(fetch.__cause__, ApiError)
    assert fetch.__cause__.status == 404
