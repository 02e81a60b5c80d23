"""Logging setup of hypertrain-daemon: text for people, one JSON object a line for machines."""

from __future__ import annotations

import json
import logging
import sys
from typing import Final, Literal, TextIO

__all__ = ["JsonFormatter", "configure_logging"]

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg"[, "exc"]}`` with ``ts`` in unix seconds."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, separators=(",", ":"))


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
