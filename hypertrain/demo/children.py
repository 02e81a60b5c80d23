"""The demo's child processes: started with their output in files, stopped in every case.

A :class:`Child` runs ``argv`` in its own session with stdout and stderr written to files (no
pipe can fill up and block it), in this process's environment minus every ``CHALLENGE_*`` and
``HYPERTRAIN_*`` variable, plus the given ones. :meth:`Child.wait_for_line` polls its stdout or
stderr file for a line (every wait is bounded). :meth:`Child.stop` sends SIGTERM, waits up to a
grace period and then kills the whole process group; :func:`open_children` guarantees that
every child started in it is stopped when the block exits, however it exits: all at once, so
stopping takes at most ``grace`` + :data:`KILL_WAIT` seconds however many children there are.

Each child also holds a lifeline (:func:`nurseries.open_lifeline`; the demo's children, the
daemon, miners, auditors and nodes, take it through their supervisor): when this process dies
without stopping them (SIGKILL), each child shuts down as on SIGHUP.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Final

import attrs
import trio

from nurseries import Lifeline, open_lifeline

__all__ = [
    "KILL_WAIT",
    "POLL_SECONDS",
    "Child",
    "ChildFailed",
    "Children",
    "child_env",
    "open_children",
    "stop_all",
]

POLL_SECONDS: Final = 0.1
"""Seconds between two looks at a child's output file."""
KILL_WAIT: Final = 10.0
"""Seconds to reap a child after SIGKILL."""
_SCRUBBED_PREFIXES: Final = ("CHALLENGE_", "HYPERTRAIN_")


class ChildFailed(Exception):
    """A child exited, or did not print what was awaited in time; the message says which."""


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """This environment without challenge/hypertrain settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_PREFIXES)}
    return env | dict(extra)


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@attrs.define(eq=False)
class Child:
    """One started child process (module doc)."""

    name: str
    process: trio.Process
    stdout: Path
    stderr: Path

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def tail(self, lines: int = 15) -> str:
        """The last lines of its stderr, for error messages."""
        return _tail(self.stderr, lines)

    async def wait_for_line(
        self, predicate: Callable[[str], bool], limit: float, *, stream: str = "stdout"
    ) -> str:
        """The first line of ``stream`` matching ``predicate``; :class:`ChildFailed` when the
        child exits first or ``limit`` seconds pass."""
        path = self.stdout if stream == "stdout" else self.stderr
        with trio.move_on_after(limit):
            while True:
                for line in path.read_text(errors="replace").splitlines():
                    if predicate(line):
                        return line
                if self.returncode is not None:
                    raise ChildFailed(
                        f"{self.name} exited with status {self.returncode}:\n{self.tail()}"
                    )
                await trio.sleep(POLL_SECONDS)
        raise ChildFailed(f"{self.name}: nothing awaited after {limit:g} s:\n{self.tail()}")

    async def wait(self, limit: float) -> int | None:
        """Its exit status within ``limit`` seconds, else None."""
        with trio.move_on_after(limit):
            return await self.process.wait()
        return None

    async def stop(self, grace: float) -> int:
        """SIGTERM, up to ``grace`` seconds, then SIGKILL of its process group; the status."""
        code = -signal.SIGKILL
        with trio.CancelScope(shield=True):
            code = await self._stop(grace)
        return code

    async def _stop(self, grace: float) -> int:
        if self.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            if await self.wait(grace) is None:
                with suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                await self.wait(KILL_WAIT)
        code = self.returncode
        return -signal.SIGKILL if code is None else code


@attrs.define(eq=False)
class Children:
    """Starts children and remembers them, so that :func:`open_children` can stop them."""

    grace: float
    lifeline: Lifeline
    started: list[Child] = attrs.field(factory=list)

    async def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        stdout: Path,
        stderr: Path,
        cwd: Path | None = None,
    ) -> Child:
        """Start ``argv`` (module doc)."""
        with stdout.open("wb") as out, stderr.open("wb") as err:
            process = await trio.lowlevel.open_process(
                list(argv),
                env=child_env(env) | self.lifeline.env,
                cwd=cwd,
                stdout=out,
                stderr=err,
                start_new_session=True,
                pass_fds=self.lifeline.pass_fds,
            )
        child = Child(name, process, stdout, stderr)
        self.started.append(child)
        return child

    def failed(self) -> list[Child]:
        """Children that already exited with a non-zero status."""
        return [c for c in self.started if c.returncode not in (None, 0)]


async def stop_all(children: Sequence[Child], grace: float) -> None:
    """:meth:`Child.stop` of every child at once (shielded): SIGTERM to each, up to ``grace``
    seconds for all of them, then SIGKILL of the groups still running."""
    with trio.CancelScope(shield=True):
        async with trio.open_nursery() as nursery:
            for child in children:
                nursery.start_soon(child.stop, grace)


@asynccontextmanager
async def open_children(grace: float) -> AsyncIterator[Children]:
    """A :class:`Children` whose every child is stopped (:func:`stop_all`) on exit."""
    with open_lifeline() as lifeline:
        children = Children(grace, lifeline)
        try:
            yield children
        finally:
            await stop_all(children.started, grace)
