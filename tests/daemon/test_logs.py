"""``--log-format``: text for people, one JSON object a line for machines."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from hypertrain.daemon.logs import configure_logging


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("restore_root_logger")
def test_json_lines() -> None:
    out = io.StringIO()
    configure_logging("json", stream=out)
    log = logging.getLogger("hypertrain.test")
    log.info("listening on %s", "http://127.0.0.1:1")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    first, second = (json.loads(line) for line in out.getvalue().splitlines() if line[:1] == "{")
    assert {k: first[k] for k in ("level", "logger", "msg")} == {
        "level": "INFO",
        "logger": "hypertrain.test",
        "msg": "listening on http://127.0.0.1:1",
    }
    assert isinstance(first["ts"], float)
    assert "ValueError: boom" in second["exc"]


@pytest.mark.usefixtures("restore_root_logger")
def test_text_lines() -> None:
    out = io.StringIO()
    configure_logging("text", stream=out)
    logging.getLogger("hypertrain.test").warning("careful")
    assert out.getvalue().rstrip().endswith("WARNING hypertrain.test: careful")
