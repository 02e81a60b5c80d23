"""``--log-format``: text for people, one JSON object a line for machines."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

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
    assert {k: first[k] for k in ("level", "logger", "message")} == {
        "level": "INFO",
        "logger": "hypertrain.test",
        "message": "listening on http://127.0.0.1:1",
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["time"]), first
    assert "ValueError: boom" in second["exc"]


@pytest.mark.usefixtures("restore_root_logger")
def test_a_records_fields_become_keys_of_its_json_line() -> None:
    out = io.StringIO()
    configure_logging("json", stream=out)
    fields = {"route": "/v1/runs/<run_id>", "status": 404, "level": "not this", "path": Path("/")}
    logging.getLogger("hypertrain.access").info("GET /x 404", extra={"fields": fields})
    line = json.loads(out.getvalue())
    assert line["level"] == "INFO"  # a field never replaces one of the line's own keys
    assert (line["route"], line["status"], line["path"]) == ("/v1/runs/<run_id>", 404, "/")


@pytest.mark.usefixtures("restore_root_logger")
def test_text_lines() -> None:
    out = io.StringIO()
    configure_logging("text", stream=out)
    logging.getLogger("hypertrain.test").warning("careful")
    assert out.getvalue().rstrip().endswith("WARNING hypertrain.test: careful")
