"""A daemon's public checkpoint routes, from outside it: list, download, fetch replay objects.

Routes (no token)::

    GET {api}/v1/runs/{id}/checkpoints                     the listing (:class:`Listing`,
                                                           shared with the daemon)
    GET {api}/v1/runs/{id}/checkpoints/{w}/{file}          a checkpoint file, raw bytes
    GET {api}/v1/runs/{id}/checkpoints/{w}/objects/{sha}   an object its tapes name (404: none)

One synchronous :class:`httpx.Client` (the commands are synchronous, and so is a replay's
``load_object``), with an injectable transport, no proxies or certificates from the
environment (``trust_env=False``), no redirects, and the timeouts and retries of
:class:`~.remote_client.Retry`: a network error or a 502/503/504 (a ``Retry-After`` honoured)
is retried for the retry budget on the schedule of :func:`nurseries.next_delay` (the async
clients' rule, in a small synchronous loop: a replay's ``load_object`` cannot await), then
:class:`~.remote_client.DaemonUnreachable` (its cause the last failure); any other non-2xx is
:class:`~.remote_client.Refused` with the daemon's ``detail``, except an object's 404, which is
NotFound (a replay names the missing object).

:func:`fetch_checkpoint` downloads one checkpoint into a directory: the three files go to a
fresh temporary directory next to ``out`` (the model file streamed to disk), each is checked
against the listing's sha256 and the two hashed files against the manifest's ``files``, and only
then is the directory renamed to ``out``; on any failure nothing is left behind. A file that is
not what the listing or the manifest says raises :class:`CheckpointMismatch`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import httpx
from attrs import frozen

from hypertrain.aggregator.checkpoint import (
    FILES,
    HASHED_FILES,
    MANIFEST_FILE,
    Status,
    parse_manifest,
)
from hypertrain.aggregator.checkpoint_listing import Entry, Listing
from hypertrain.aggregator.remote_client import (
    DEFAULT_RETRY,
    RETRIED_STATUSES,
    DaemonUnreachable,
    Refused,
    RemoteError,
    Retry,
    RetryableStatus,
    response_detail,
    transient,
)
from hypertrain.protocol.converter import structure
from hypertrain.protocol.errors import Malformed, NotFound
from nurseries import next_delay

__all__ = [
    "CheckpointClient",
    "CheckpointMismatch",
    "Entry",
    "Fetched",
    "Listing",
    "fetch_checkpoint",
]

_CHUNK = 1 << 20
T = TypeVar("T")


class CheckpointMismatch(RemoteError):
    """The daemon's listing or a downloaded file is not what it should be."""


@frozen
class Fetched:
    """A checkpoint written to ``out``: which one, and the sha256 of each file."""

    run_id: str
    w: int
    status: Status
    out: str
    files: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        """``{run_id, w, status, out, files}``."""
        return {
            "run_id": self.run_id,
            "w": self.w,
            "status": self.status,
            "out": self.out,
            "files": dict(self.files),
        }


class CheckpointClient:
    """The public checkpoint routes of the daemon at ``api`` (module doc)."""

    def __init__(
        self,
        api: str,
        *,
        transport: httpx.BaseTransport | None = None,
        retry: Retry = DEFAULT_RETRY,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api.rstrip("/")
        self.retry = retry
        self._sleep = sleep
        self._clock = clock
        self._http = httpx.Client(
            transport=transport, timeout=retry.timeout, trust_env=False, follow_redirects=False
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CheckpointClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, retried like :func:`nurseries.retry` (module doc), synchronously."""
        deadline = self._clock() + self.retry.budget
        failures = 0
        while True:
            try:
                return call()
            except Exception as error:
                wait = transient(error)
                if wait is None:
                    raise
                failures += 1
                delay = next_delay(
                    self.retry.backoff, failures, self.retry.draw(), now=self._clock(),
                    deadline=deadline, not_before=wait,
                )  # fmt: skip
                if delay is None:
                    raise DaemonUnreachable(
                        f"{what}: no answer after {failures} tries ({error})"
                    ) from error
            self._sleep(delay)

    def _get_once(
        self, path: str, *, ok: tuple[int, ...] = (), stream: bool = False
    ) -> httpx.Response:
        """One GET of ``path``; a refusal raises :class:`Refused`, a 502/503/504
        :class:`RetryableStatus`. A ``stream`` answer's body is still to be read (the caller
        closes it); otherwise it has been read."""
        response = self._http.send(self._http.build_request("GET", self.api + path), stream=stream)
        if response.is_success or response.status_code in ok:
            return response
        try:
            response.read()
        finally:
            response.close()
        status = response.status_code
        if status not in RETRIED_STATUSES:
            raise Refused("GET", path, status, response_detail(response))
        raise RetryableStatus(f"HTTP {status}: {response_detail(response)}", response)

    def _get(self, path: str, *, ok: tuple[int, ...] = ()) -> httpx.Response:
        """GET ``path``, retried (module doc), its body read."""
        return self._retrying(f"GET {self.api}{path}", lambda: self._get_once(path, ok=ok))

    def listing(self, run_id: str) -> Listing:
        """The run's checkpoints; CheckpointMismatch for a listing that is not one."""
        response = self._get(f"/v1/runs/{run_id}/checkpoints")
        try:
            listing = structure(Listing, response.json())
        except (ValueError, Malformed) as e:
            raise CheckpointMismatch(f"the checkpoint listing is not valid: {e}") from e
        if listing.run_id != run_id:
            raise CheckpointMismatch(f"the listing is of run {listing.run_id}, not {run_id}")
        return listing

    def download(self, run_id: str, w: int, name: str, out: BinaryIO) -> str:
        """Stream file ``name`` of checkpoint ``w`` into ``out`` (rewound for each try, also
        when the connection breaks mid-file); returns its sha256."""
        path = f"/v1/runs/{run_id}/checkpoints/{w}/{name}"

        def once() -> str:
            out.seek(0)
            out.truncate()
            digest = hashlib.sha256()
            response = self._get_once(path, stream=True)
            try:
                for chunk in response.iter_bytes(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
            finally:
                response.close()
            return digest.hexdigest()

        return self._retrying(f"GET {self.api}{path}", once)

    def get_object(self, run_id: str, w: int, sha256: str) -> bytes:
        """Object ``sha256`` of checkpoint ``w``'s tapes, unchecked (a replay checks it);
        NotFound on 404."""
        response = self._get(f"/v1/runs/{run_id}/checkpoints/{w}/objects/{sha256}", ok=(404,))
        if response.status_code == 404:
            raise NotFound(f"the daemon has no object {sha256}: {response_detail(response)}")
        return response.content


def _pick(listing: Listing, w: int | None) -> Entry:
    if not listing.checkpoints:
        raise CheckpointMismatch(f"run {listing.run_id} has no checkpoint yet")
    if w is None:
        return listing.checkpoints[-1]
    for entry in listing.checkpoints:
        if entry.w == w:
            return entry
    ws = ", ".join(str(e.w) for e in listing.checkpoints)
    raise CheckpointMismatch(f"run {listing.run_id} has no checkpoint at w={w} (it has {ws})")


def _refuse_nonempty(out: Path) -> None:
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise FileExistsError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        raise FileExistsError(f"{out}: exists and is not empty")


def _check(entry: Entry, run_id: str, hashes: dict[str, str], manifest_file: Path) -> None:
    for name in FILES:
        if hashes[name] != entry.files[name]:
            raise CheckpointMismatch(
                f"{name}: the bytes hash to {hashes[name]}, the listing says {entry.files[name]}"
            )
    try:
        body = parse_manifest(manifest_file.read_bytes()).body
    except Malformed as e:
        raise CheckpointMismatch(f"{MANIFEST_FILE}: {e.detail}") from e
    for name in HASHED_FILES:
        if body.files[name] != hashes[name]:
            raise CheckpointMismatch(
                f"{name}: the bytes hash to {hashes[name]}, the manifest says {body.files[name]}"
            )
    said = (body.run_id, body.rounds[1], body.status)
    if said != (run_id, entry.w, entry.status):
        raise CheckpointMismatch(
            f"{MANIFEST_FILE}: is of run {said[0]} w={said[1]} ({said[2]}), the listing's"
            f" entry is w={entry.w} ({entry.status})"
        )


def fetch_checkpoint(
    client: CheckpointClient, run_id: str, out: Path, *, w: int | None = None
) -> Fetched:
    """Download checkpoint ``w`` (default: the newest) of run ``run_id`` into ``out``, which
    must not exist or be an empty directory (FileExistsError otherwise); module doc."""
    _refuse_nonempty(out)
    entry = _pick(client.listing(run_id), w)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent))
    try:
        hashes = {}
        for name in FILES:
            with open(tmp / name, "wb") as f:
                hashes[name] = client.download(run_id, entry.w, name, f)
                f.flush()
                os.fsync(f.fileno())
        _check(entry, run_id, hashes, tmp / MANIFEST_FILE)
        _refuse_nonempty(out)
        os.rename(tmp, out)  # replaces an empty directory, atomically
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Fetched(run_id=run_id, w=entry.w, status=entry.status, out=str(out), files=hashes)
