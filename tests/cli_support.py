"""Reading what a command-line program printed, for the CLI tests."""

from __future__ import annotations

import pytest


def one_error_line(capsys: pytest.CaptureFixture[str], *, stdout_empty: bool = True) -> str:
    """The one line the program wrote on stderr (no traceback); with ``stdout_empty``, it also
    wrote nothing on stdout."""
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    if stdout_empty:
        assert captured.out == ""
    return lines[0]
