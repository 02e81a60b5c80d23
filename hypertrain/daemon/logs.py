"""Logging setup of hypertrain-daemon: text for people, one JSON object a line for machines.

``--log-format json`` writes each record as one line holding one JSON object::

    {"time": "2026-12-02T10:40:01.234Z", "level": "INFO", "logger": "hypertrain.access",
     "message": "GET /v1/runs/ab12 200 1.3ms route=/v1/runs/<run_id>", "method": "GET",
     "path": "/v1/runs/ab12", "route": "/v1/runs/<run_id>", "status": 200,
     "duration_ms": 1.3, "client": "127.0.0.1:50412"}

``time`` is UTC with milliseconds, ``exc`` holds a traceback when there is one, and a record
logged with ``extra={"fields": {...}}`` adds those keys (the access lines'
:mod:`hypertrain.coordinator.web.instrument` does; they never replace the five above). The text
format shows the same message: ``TIME LEVEL LOGGER: MESSAGE``.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final, Literal, TextIO

__all__ = ["JsonFormatter", "configure_logging"]

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_OWN_KEYS: Final = frozenset({"time", "level", "logger", "message", "exc"})


class JsonFormatter(logging.Formatter):
    """One JSON object a line (module doc)."""

    def format(self, record: logging.LogRecord) -> str:
        time = datetime.fromtimestamp(record.created, UTC)
        entry: dict[str, object] = {
            "time": time.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            entry.update((str(k), v) for k, v in fields.items() if k not in _OWN_KEYS)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, separators=(",", ":"), default=str)


def configure_logging(
    log_format: Literal["text", "json"], *, level: int = logging.INFO, stream: TextIO | None = None
) -> None:
    """Send the root logger's records to ``stream`` (stderr) in ``log_format``."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
