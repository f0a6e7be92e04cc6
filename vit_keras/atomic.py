"""Atomic writes: a file or directory either lands complete under its final name or not at all.

Files and directories are written to a temporary sibling in the same directory, then renamed.
Local paths use the operating system; remote paths (gs://...) go through `tf.io.gfile`, where a
directory rename copies, so it is only atomic on local disks. TensorFlow is imported only for
remote paths. Keras model and weights files are written by `save_model` / `save_weights`, the
one saver every part of the project uses.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid


def is_remote(path: str) -> bool:
    """Whether `path` is a URL-style path (gs://, s3://, ...) that needs `tf.io.gfile`."""
    return "://" in path


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def _temporary_sibling(path: str) -> str:
    parent, name = os.path.split(path.rstrip("/"))
    # The name keeps its extension: Keras checks it ('.keras', '.weights.h5').
    return os.path.join(parent, f".tmp-{uuid.uuid4().hex[:8]}-{name}")


def makedirs(path: str) -> None:
    """Creates the directory `path` and its parents (local or remote); no error if it exists."""
    if is_remote(path):
        _gfile().makedirs(path)
    elif path:
        os.makedirs(path, exist_ok=True)


def exists(path: str) -> bool:
    """Whether `path` exists (local or remote)."""
    return _gfile().exists(path) if is_remote(path) else os.path.exists(path)


def remove(path: str) -> None:
    """Deletes the file or directory tree `path` if it exists (local or remote)."""
    if is_remote(path):
        gfile = _gfile()
        if gfile.isdir(path):
            gfile.rmtree(path)
        elif gfile.exists(path):
            gfile.remove(path)
    elif os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def _rename(source: str, destination: str) -> None:
    if is_remote(destination):
        _gfile().rename(source, destination, overwrite=True)
    else:
        os.replace(source, destination)


def write_bytes(path: str, data: bytes) -> None:
    """Writes `data` to `path` through a temporary file and a rename.

    Args:
        path: destination file; its directory is created if missing.
        data: the file contents.
    """
    with staged_path(path) as temporary:
        if is_remote(temporary):
            with _gfile().GFile(temporary, "wb") as handle:
                handle.write(data)
        else:
            with open(temporary, "wb") as handle:
                handle.write(data)


@contextlib.contextmanager
def staged_path(path: str):
    """Yields a temporary sibling of `path` to write into; publishes it under `path` on success.

    Works for a file or a directory. If the body raises, the temporary is deleted and whatever
    was at `path` before stays untouched.

    Args:
        path: the final file or directory name.

    Yields:
        The temporary path (not yet created).
    """
    makedirs(os.path.dirname(path.rstrip("/")))
    temporary = _temporary_sibling(path)
    try:
        yield temporary
        _publish(temporary, path)
    except BaseException:
        remove(temporary)
        raise


def publish(temporary: str, path: str) -> None:
    """Renames a finished file or directory to `path`, replacing what was there atomically.

    Args:
        temporary: the finished file or directory, on the same file system as `path`.
        path: its final name.
    """
    _publish(temporary, path)


def _publish(temporary: str, path: str) -> None:
    is_dir = _gfile().isdir(temporary) if is_remote(temporary) else os.path.isdir(temporary)
    if not is_dir:
        _rename(temporary, path)
        return
    # A directory cannot be renamed over an existing one: move the old one aside first.
    previous = None
    if exists(path):
        previous = _temporary_sibling(path)
        _rename(path, previous)
    try:
        _rename(temporary, path)
    except BaseException:
        if previous is not None:
            _rename(previous, path)
        raise
    if previous is not None:
        remove(previous)


@contextlib.contextmanager
def _local_staging(path: str):
    """Yields a local file name with `path`'s extension to write; publishes it atomically.

    Keras and h5py write local files only, so a remote `path` is written locally first, then
    copied to a temporary remote sibling and renamed.
    """
    if not is_remote(path):
        with staged_path(path) as temporary:
            yield temporary
        return
    with tempfile.TemporaryDirectory() as directory:
        local = os.path.join(directory, os.path.basename(path))
        yield local
        with staged_path(path) as temporary:
            _gfile().copy(local, temporary, overwrite=True)


def save_model(model, path: str) -> None:
    """`model.save(path)` (a `.keras` file), atomically, locally or remotely."""
    with _local_staging(path) as local:
        model.save(local)


def save_weights(model, path: str) -> None:
    """`model.save_weights(path)` (a `.weights.h5` file), atomically, locally or remotely."""
    with _local_staging(path) as local:
        model.save_weights(local)
