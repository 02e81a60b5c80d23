"""The scorer worker's audit-hook policy (PEP 578): what Python may still do once armed.

:func:`refusal` is the pure rule; :func:`arm` installs it, once, in the worker process (a hook
can never be removed, so only ``python -m hypertrain.scoring.worker`` may call :func:`arm`;
never a test process or the node). Once armed, these audit events raise
:class:`SandboxViolation` (``sandbox refused <event>: <detail>``):

- ``open`` of anything other than one of the job's input files (compared after resolving
  symlinks), of a bare file descriptor, or of any file for writing (a mode with ``w``, ``a``,
  ``x`` or ``+``, or write/create/truncate/append flags) — input files included;
- ``import`` of a module not yet loaded: the worker imports everything it needs before arming,
  so nothing new is read from disk afterwards (``importlib.import_module`` raises no
  ``import`` event; the ``open`` rule stops it when it reads the module's file);
- starting programs: ``subprocess.Popen``, ``os.system``, ``os.exec``, ``os.spawn``,
  ``os.posix_spawn``, ``os.fork``, ``os.forkpty``, ``pty.spawn``;
- the network: ``socket.__new__``, ``socket.connect``, ``socket.bind``, ``socket.sendto``,
  ``socket.sendmsg``, ``socket.getaddrinfo``, ``socket.gethostbyname`` and friends;
- native code: ``ctypes.dlopen``, ``ctypes.dlsym``, ``ctypes.call_function``, raw memory
  reads (``ctypes.cdata``, ``ctypes.string_at``);
- the file system: removing, renaming, linking, creating directories, changing modes, owners,
  times or extended attributes, listing directories, temporary files, ``shutil`` copies,
  moves and ``rmtree``, ``mmap`` of a file;
- the process: ``os.kill``, ``os.killpg``, ``signal.pthread_kill``, ``os.chdir``,
  ``os.putenv``/``os.unsetenv``, ``resource.setrlimit``/``prlimit``.

What the hook is and is not: audit hooks see Python-level operations only. They stop our own
scorer code, or a Python-level flaw reached through crafted input, from touching anything but
its inputs; they do not contain native code (a C extension, or ``_posixsubprocess`` called
directly, bypasses them). The hard boundary is the parent's: rlimits on address space, CPU,
open files and file size, a scrubbed environment, its own process group killed at the deadline
(:mod:`hypertrain.scoring.sandbox`). Compiling and running Python code (``compile``/``exec``
events) stays allowed: cattrs and attrs generate code at run time.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Final

__all__ = ["REFUSED_EVENTS", "SandboxViolation", "arm", "refusal"]

REFUSED_EVENTS: Final = frozenset(
    {
        "import",
        # programs
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.spawn",
        "os.posix_spawn",
        "os.fork",
        "os.forkpty",
        "pty.spawn",
        "os.startfile",
        # network
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
        "socket.getnameinfo",
        "socket.sethostname",
        # native code
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.dlsym/handle",
        "ctypes.call_function",
        "ctypes.cdata",
        "ctypes.cdata/buffer",
        "ctypes.string_at",
        "ctypes.wstring_at",
        # file system
        "os.remove",
        "os.rename",
        "os.rmdir",
        "os.mkdir",
        "os.link",
        "os.symlink",
        "os.chmod",
        "os.lchmod",
        "os.chown",
        "os.lchown",
        "os.chflags",
        "os.lchflags",
        "os.truncate",
        "os.utime",
        "os.mkfifo",
        "os.mknod",
        "os.setxattr",
        "os.removexattr",
        "os.getxattr",
        "os.listxattr",
        "os.listdir",
        "os.scandir",
        "os.fwalk",
        "glob.glob",
        "glob.glob/2",
        "tempfile.mkstemp",
        "tempfile.mkdtemp",
        "shutil.copyfile",
        "shutil.copymode",
        "shutil.copystat",
        "shutil.copytree",
        "shutil.move",
        "shutil.rmtree",
        "shutil.chown",
        "shutil.make_archive",
        "shutil.unpack_archive",
        "mmap.__new__",
        # the process
        "os.kill",
        "os.killpg",
        "signal.pthread_kill",
        "os.chdir",
        "os.putenv",
        "os.unsetenv",
        "resource.setrlimit",
        "resource.prlimit",
    }
)

_WRITE_FLAGS: Final = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class SandboxViolation(RuntimeError):
    """An armed worker attempted something the policy refuses (module doc)."""


def _resolve(path: object) -> str | None:
    if not isinstance(path, str | bytes | os.PathLike):
        return None
    try:
        return os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError, OSError):
        return None


def _open_refusal(args: tuple[object, ...], readable: frozenset[str]) -> str | None:
    path, mode, flags = (*args, None, None, None)[:3]
    if isinstance(path, int):
        return f"open of file descriptor {path}"
    writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
        isinstance(flags, int) and flags & _WRITE_FLAGS
    )
    shown = repr(path)[:200]
    if writing:
        return f"open of {shown} for writing"
    if _resolve(path) not in readable:
        return f"open of {shown}, which is not an input file"
    return None


def refusal(event: str, args: tuple[object, ...], readable: frozenset[str]) -> str | None:
    """Why an armed worker refuses ``event`` (``None``: allowed); ``readable`` holds the
    resolved paths of the input files."""
    if event == "open":
        return _open_refusal(args, readable)
    if event in REFUSED_EVENTS:
        return repr(args[0])[:200] if args else "not allowed"
    return None


_armed = False


def arm(readable_paths: Iterable[str | os.PathLike[str]]) -> None:
    """Install the hook for this process, allowing reads of ``readable_paths`` only.

    Irreversible; a second call raises RuntimeError.
    """
    global _armed
    if _armed:
        raise RuntimeError("the sandbox is already armed in this process")
    readable = frozenset(os.path.realpath(os.fspath(p)) for p in readable_paths)

    def hook(event: str, args: tuple[object, ...]) -> None:
        why = refusal(event, args, readable)
        if why is not None:
            raise SandboxViolation(f"sandbox refused {event}: {why}")

    sys.addaudithook(hook)
    _armed = True
