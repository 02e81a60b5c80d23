"""The node's local pieces: node.json, the hardware class, tool probes and the input cache."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from hypertrain.compute.wire import InputFile
from hypertrain.node.cache import InputCache
from hypertrain.node.errors import InputMismatch, NodeFileError
from hypertrain.node.nodefile import (
    NodeRecord,
    is_node_key,
    load_record,
    node_dir,
    save_record,
)
from hypertrain.node.probe import (
    CPU_GENERIC,
    ToolReport,
    capabilities,
    detect_hardware,
    normalize_hardware,
    probe_tools,
)
from hypertrain.scoring.inputs import BadInput, check_input_name

KEY = "ht_" + "aB3" * 10 + "xy"


def _record(key: str = KEY) -> NodeRecord:
    return NodeRecord(key, "n1", "node-1", "http://127.0.0.1:8000", 1_700_000_000)


def test_node_json_round_trips_with_mode_0600(tmp_path: Path) -> None:
    directory = tmp_path / "node"
    path = save_record(directory, _record())
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(directory.stat().st_mode & 0o777) == "0o700"
    assert load_record(directory) == _record()
    assert load_record(tmp_path / "elsewhere") is None


def test_an_unsafe_or_broken_node_json_is_refused(tmp_path: Path) -> None:
    path = save_record(tmp_path, _record())
    path.chmod(0o644)
    with pytest.raises(NodeFileError, match="lets others read it"):
        load_record(tmp_path)
    path.unlink()
    (tmp_path / "real.json").write_text("{}")
    path.symlink_to(tmp_path / "real.json")
    with pytest.raises(NodeFileError, match="cannot open"):
        load_record(tmp_path)
    path.unlink()
    save_record(tmp_path, _record(key="ht_short"))
    with pytest.raises(NodeFileError, match="not a node key"):
        load_record(tmp_path)
    path.write_text("{not json")
    with pytest.raises(NodeFileError, match="not a node record"):
        load_record(tmp_path)


def test_the_node_directory_follows_flag_then_environment_then_home() -> None:
    assert node_dir("/x", {"HYPERTRAIN_NODE_DIR": "/y"}) == Path("/x")
    assert node_dir(None, {"HYPERTRAIN_NODE_DIR": "/y"}) == Path("/y")
    assert node_dir(None, {"HYPERTRAIN_NODE_DIR": " "}) == Path.home() / ".hypertrain/node"


def test_node_keys_have_one_shape() -> None:
    assert is_node_key(KEY)
    for bad in ("ht_", KEY + "a", KEY[:-1] + "-", "dmi_" + KEY[3:], None, 5):
        assert not is_node_key(bad)


def _runner(answers: dict[str, tuple[int, str] | None]):  # type: ignore[no-untyped-def]
    def run(argv: Sequence[str]) -> tuple[int, str] | None:
        return answers.get(argv[0])

    return run


def test_the_hardware_class_comes_from_the_override_then_the_gpu_tools() -> None:
    assert normalize_hardware("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert normalize_hardware(" -- ") is None
    assert normalize_hardware("x" * 70 + "-y") == "x" * 64
    gpu = _runner({"nvidia-smi": (0, "\nNVIDIA GeForce RTX 4090\nNVIDIA A100\n")})
    assert detect_hardware({}, gpu) == "nvidia-geforce-rtx-4090"
    assert detect_hardware({"HYPERTRAIN_HARDWARE": "My Box"}, gpu) == "my-box"
    amd = _runner({"nvidia-smi": (9, ""), "rocm-smi": (0, "GPU[0]: Card series: Instinct MI300X")})
    assert detect_hardware({}, amd) == "amd-instinct-mi300x"
    assert detect_hardware({}, _runner({})) == CPU_GENERIC


def test_capabilities_need_every_tool_and_the_timing_class(tmp_path: Path) -> None:
    torch_ok = {"torch": ToolReport("torch", True, "torch 2.13.0")}
    assert capabilities(torch_ok, "cpu-generic") == ["delta-loss", "step-throughput"]
    assert capabilities(torch_ok, "nvidia-h100") == ["delta-loss"]
    assert capabilities({"torch": ToolReport("torch", False, "")}, "cpu-generic") == []
    assert capabilities({}, "cpu-generic") == []


def test_a_tool_probe_runs_the_tool() -> None:
    reports = probe_tools(["torch", "nope"])
    assert reports["torch"].present, reports["torch"]
    assert reports["torch"].detail.startswith("torch 2.")
    assert not reports["nope"].present
    broken = probe_tools(["torch"], _runner({}))
    assert not broken["torch"].present


def _spec(data: bytes, name: str = "trace.u16") -> InputFile:
    return InputFile(name, hashlib.sha256(data).hexdigest(), len(data))


def _serve(data: bytes, calls: list[str]):  # type: ignore[no-untyped-def]
    async def fetch(spec: InputFile) -> AsyncIterator[bytes]:
        calls.append(spec.name)
        for i in range(0, len(data), 3):
            yield data[i : i + 3]

    return fetch


async def test_the_cache_fetches_once_and_rehashes_before_every_use(tmp_path: Path) -> None:
    data = b"some trace bytes"
    cache, calls = InputCache(tmp_path), []
    path = await cache.ensure(_spec(data), _serve(data, calls))
    assert path.read_bytes() == data
    assert await cache.ensure(_spec(data), _serve(data, calls)) == path
    assert calls == ["trace.u16"]
    path.write_bytes(b"some trace bytez")  # damaged on disk, same size
    assert (await cache.ensure(_spec(data), _serve(data, calls))).read_bytes() == data
    assert calls == ["trace.u16", "trace.u16"]


async def test_a_wrong_download_is_never_stored(tmp_path: Path) -> None:
    cache = InputCache(tmp_path)
    spec = _spec(b"expected")
    for served, reason in (
        (b"unexpect", "has sha256"),
        (b"expected!", "over the cap of 8 bytes"),
        (b"exp", "3 bytes, declared 8"),
    ):
        with pytest.raises(InputMismatch, match=reason):
            await cache.ensure(spec, _serve(served, []))
        assert not cache.path_of(spec.sha256).exists()
        assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []


async def test_job_links_are_named_by_checked_names(tmp_path: Path) -> None:
    cache = InputCache(tmp_path)
    data = b"abc"
    await cache.ensure(_spec(data), _serve(data, []))
    paths = cache.link_job("job-1", [_spec(data, "model.json"), _spec(data, "trace.u16")])
    assert {n: p.read_bytes() for n, p in paths.items()} == {"model.json": data, "trace.u16": data}
    assert all(p.parent == tmp_path / "jobs" / "job-1" for p in paths.values())
    cache.drop_job("job-1")
    assert not (tmp_path / "jobs" / "job-1").exists()
    for hostile in ("../x", "/etc/passwd", "", "a/b", ".hidden", "x" * 65, "a..b"):
        with pytest.raises(BadInput, match="is not"):
            check_input_name(hostile)
    with pytest.raises(ValueError, match="sha256"):
        InputFile("a", "ABC", 1)
