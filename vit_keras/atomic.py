"""Atomic writes: a file or directory either lands complete under its final name or not at all.

Files and directories are written to a temporary sibling in the same directory, then renamed.
`tf.io.gfile` handles the renames so remote paths (gs://...) work too; there a directory rename
copies, so it is only atomic on local disks.
"""

from __future__ import annotations

import contextlib
import os
import uuid

import tensorflow as tf


def _temporary_sibling(path: str) -> str:
    parent, name = os.path.split(path.rstrip("/"))
    return os.path.join(parent, f".{name}.tmp-{uuid.uuid4().hex[:8]}")


def _remove(path: str) -> None:
    if tf.io.gfile.isdir(path):
        tf.io.gfile.rmtree(path)
    elif tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)


def write_bytes(path: str, data: bytes) -> None:
    """Writes `data` to `path` through a temporary file and a rename.

    Args:
        path: destination file; its directory is created if missing.
        data: the file contents.
    """
    parent = os.path.dirname(path)
    if parent:
        tf.io.gfile.makedirs(parent)
    temporary = _temporary_sibling(path)
    try:
        with tf.io.gfile.GFile(temporary, "wb") as handle:
            handle.write(data)
        tf.io.gfile.rename(temporary, path, overwrite=True)
    except BaseException:
        _remove(temporary)
        raise


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
    parent = os.path.dirname(path.rstrip("/"))
    if parent:
        tf.io.gfile.makedirs(parent)
    temporary = _temporary_sibling(path)
    try:
        yield temporary
        _publish(temporary, path)
    except BaseException:
        _remove(temporary)
        raise


def _publish(temporary: str, path: str) -> None:
    if not tf.io.gfile.isdir(temporary):
        tf.io.gfile.rename(temporary, path, overwrite=True)
        return
    # A directory cannot be renamed over an existing one: move the old one aside first.
    previous = None
    if tf.io.gfile.exists(path):
        previous = _temporary_sibling(path)
        tf.io.gfile.rename(path, previous)
    try:
        tf.io.gfile.rename(temporary, path)
    except BaseException:
        if previous is not None:
            tf.io.gfile.rename(previous, path)
        raise
    if previous is not None:
        _remove(previous)
