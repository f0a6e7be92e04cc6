"""Downloads weight files into the Keras cache, whole and verified or not at all.

A file is streamed to a temporary `<name>.<writer>.<pid>.<random>.part` next to its final one,
checked (the length the server announced, the registry's size and sha256 when known, and the
file's own structure: every member's CRC of an `.npz`, the header and length of a
`.safetensors`), and only then renamed into place. Two processes downloading the same file at
once each write their own temporary file; the renames are atomic, so the cache never holds a
partial file. A download killed on its way (SIGKILL, a preempted VM) leaves its `.part` file;
the next download of that file removes it once its writer is gone (`remove_stale_parts`).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request

from vit_keras.checkpoints import io

CHUNK_BYTES = 1 << 20
TIMEOUT_SECONDS = 60  # per socket operation, not for the whole download
# A `.part` file whose writer cannot be asked (another host, an older name) is left to a
# download that may still be alive until it has not changed for this long.
STALE_PART_SECONDS = 3600


class DownloadError(ValueError):
    """A weight file could not be downloaded or failed verification (nothing was cached)."""


def cache_root() -> str:
    """Where downloaded weights live: `$KERAS_HOME/models/vit_keras`, as `keras.utils.get_file`.

    Returns:
        `KERAS_HOME` when set, else `~/.keras`, else (not writable) `/tmp/.keras` (Keras'
        convention), followed by `models/vit_keras`.
    """
    base = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    if not os.environ.get("KERAS_HOME") and not _writable(base):
        base = os.path.join(tempfile.gettempdir(), ".keras")
    return os.path.join(base, "models", "vit_keras")


def _writable(directory: str) -> bool:
    probe = directory
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return False
        probe = parent
    return os.access(probe, os.W_OK)


def download(url: str, destination: str, *, size: int | None = None,
             sha256: str | None = None, validate=None, hint: str = "",
             quiet: bool = False) -> str:
    """Downloads `url` to `destination` unless it is already there.

    Args:
        url: http(s) address of the file.
        destination: final local path (its folder is created).
        size: expected size in bytes, when known.
        sha256: expected hex digest, when known.
        validate: optional function(path) -> None, or why the downloaded file is not the one
            expected; run before the file is moved into place.
        hint: more advice for the error message (e.g. a mirror setting).
        quiet: no progress output.

    Returns:
        `destination`.

    Raises:
        DownloadError: the server could not be reached or answered an error, the transfer
            ended early, the file failed a check, or the cache is not writable. The error
            names the URL and where to put the file by hand; no file is left under
            `destination`.
    """
    remove_stale_parts(destination)
    if os.path.exists(destination):
        _check_cached(destination, size)
        return destination
    by_hand = _by_hand(url, destination, hint)
    try:
        os.makedirs(os.path.dirname(destination), exist_ok=True)
        handle, temp_path = tempfile.mkstemp(prefix=_part_prefix(destination), suffix=".part",
                                             dir=os.path.dirname(destination))
    except OSError as error:
        raise DownloadError(f"cannot write into the weights cache: {error}\n  {by_hand}") from None
    try:
        with os.fdopen(handle, "wb") as file:
            digest = _stream(url, file, quiet)
        _verify(temp_path, digest, size, sha256, validate)
        os.chmod(temp_path, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        _move_into_place(temp_path, destination)
    except DownloadError as error:
        raise DownloadError(f"{error}\n  {by_hand}") from None
    except OSError as error:
        raise DownloadError(f"cannot write {destination}: {error}\n  {by_hand}") from None
    finally:
        if os.path.exists(temp_path):
            os.remove(temp_path)
    return destination


def _writer() -> str:
    """This host and process-id namespace (containers may share a host name), dot-free."""
    host = (socket.gethostname().replace(".", "_") or "host")[:64]
    try:
        return f"{host}_{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return host


def _part_prefix(destination: str) -> str:
    """`<name>.<writer>.<pid>.`: what tells a later download whether the writer still runs."""
    return f"{os.path.basename(destination)}.{_writer()}.{os.getpid()}."


def remove_stale_parts(destination: str) -> list[str]:
    """Removes the `.part` files that killed downloads of `destination` left beside it.

    A part is stale when its writer (host, process-id namespace and process id in its name)
    is here and no longer runs, or when it has not changed for `STALE_PART_SECONDS` (its writer
    on another host or in another container sharing the cache, a name without them, a process
    id used again). Parts of live downloads stay.

    Args:
        destination: the downloaded file's final path.

    Returns:
        The paths removed.
    """
    folder, name = os.path.split(destination)
    try:
        entries = [entry for entry in os.scandir(folder or ".")
                   if entry.name.startswith(name + ".") and entry.name.endswith(".part")]
    except OSError:  # no cache folder yet
        return []
    removed = []
    for entry in entries:
        if _writer_gone(entry, entry.name[len(name) + 1:-len(".part")]):
            try:
                os.remove(entry.path)
                removed.append(entry.path)
            except OSError:  # removed by another process meanwhile, or not ours to remove
                pass
    return removed


def _writer_gone(entry: os.DirEntry, middle: str) -> bool:
    """Whether the download writing the part `entry` (`middle` = '<writer>.<pid>.<random>') is
    over: its process here has ended, or the part has not changed for an hour."""
    try:
        if time.time() - entry.stat().st_mtime > STALE_PART_SECONDS:
            return True
    except OSError:
        return False
    fields = middle.rsplit(".", 2)
    if len(fields) != 3 or fields[0] != _writer() or not fields[1].isdigit() or \
            os.name != "posix":
        return False  # its writer cannot be asked
    pid = int(fields[1])
    if pid == os.getpid():
        return False  # another thread of this process may be downloading it
    try:
        os.kill(pid, 0)  # signal 0 only asks whether the process exists
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    return False


def _move_into_place(temp_path: str, destination: str) -> None:
    """Atomic rename; where another process's rename won the race (Windows refuses to replace
    an open file), its identical file stays."""
    try:
        os.replace(temp_path, destination)
    except PermissionError:
        if not os.path.exists(destination):
            raise


def _by_hand(url: str, destination: str, hint: str) -> str:
    return (f"To install it by hand (offline, behind a proxy), download {url} and save it as "
            f"{destination}{'; ' + hint if hint else ''}.")


def _check_cached(path: str, size: int | None) -> None:
    if size is not None and os.path.getsize(path) != size:
        raise DownloadError(f"cached weight file {path} has {os.path.getsize(path)} bytes, "
                            f"expected {size}: delete it to download it again")


def _stream(url: str, file, quiet: bool) -> str:
    """Copies the body of `url` into `file`; returns its sha256. Raises DownloadError."""
    request = urllib.request.Request(url, headers={"User-Agent": "vit_keras"})
    digest, received, started = hashlib.sha256(), 0, time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
            announced = response.headers.get("Content-Length")
            total = int(announced) if announced and announced.isdigit() else None
            if not quiet:
                print(f"Downloading {url}" + (f" ({total / 1e6:.1f} MB)" if total else ""),
                      file=sys.stderr, flush=True)
            while chunk := response.read(CHUNK_BYTES):
                file.write(chunk)
                digest.update(chunk)
                received += len(chunk)
    except urllib.error.HTTPError as error:
        raise DownloadError(f"cannot download {url}: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise DownloadError(f"cannot download {url}: {reason}") from None
    except http.client.HTTPException as error:  # e.g. IncompleteRead: the connection dropped
        raise DownloadError(f"download of {url} ended early after {received} bytes "
                            f"({type(error).__name__})") from None
    if total is not None and received != total:
        raise DownloadError(f"download of {url} ended early: received {received} of {total} "
                            "bytes")
    if not quiet:
        print(f"Downloaded {received / 1e6:.1f} MB in {time.monotonic() - started:.1f} s",
              file=sys.stderr, flush=True)
    return digest.hexdigest()


def _verify(path: str, digest: str, size: int | None, sha256: str | None, validate) -> None:
    """Raises DownloadError unless the downloaded file is the expected, intact weight file."""
    actual_size = os.path.getsize(path)
    if size is not None and actual_size != size:
        raise DownloadError(f"downloaded file has {actual_size} bytes, expected {size}")
    if sha256 is not None and digest != sha256.lower():
        raise DownloadError(f"downloaded file has sha256 {digest}, expected {sha256.lower()}")
    problem = io.integrity_problem(path)
    if problem:
        raise DownloadError(f"downloaded file is not an intact weight file: {problem}")
    problem = validate(path) if validate is not None else None
    if problem:
        raise DownloadError(f"downloaded file is not the one expected: {problem}")
