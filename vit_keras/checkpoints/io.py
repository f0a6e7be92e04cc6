"""Safe reading and atomic writing of weight files (`.npz` and `.safetensors`, never pickle)."""

from __future__ import annotations

import io
import json
import os
import struct
import zipfile

import numpy as np

from vit_keras import atomic

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # an .npz is a zip archive of .npy files


def _read_bytes(path: str) -> bytes:
    """The contents of a local file, or of a remote (gs://) one through `tf.io.gfile`."""
    if atomic.is_remote(path):
        import tensorflow as tf  # lazily: only remote paths need TensorFlow

        with tf.io.gfile.GFile(path, "rb") as file:
            return file.read()
    with open(path, "rb") as file:
        return file.read()


def detect_format(data: bytes) -> str | None:
    """Returns 'npz', 'safetensors' or None from the first bytes of a file."""
    if data[:4] in ZIP_MAGIC:
        return "npz"
    if len(data) >= 9:
        (header_size,) = struct.unpack("<Q", data[:8])
        if 2 <= header_size <= len(data) - 8 and data[8:9] == b"{":
            return "safetensors"
    return None


def read_tensors(path: str) -> tuple[str, dict[str, np.ndarray]]:
    """Reads every tensor of an `.npz` or `.safetensors` file, without unpickling anything.

    Args:
        path: local or `gs://` path.

    Returns:
        (format, tensors): format is 'npz' or 'safetensors'; tensors maps names to numpy arrays.

    Raises:
        ValueError: the file is missing, truncated, corrupt, holds pickled objects or is of
            another format.
    """
    if not atomic.exists(path):
        raise ValueError(f"checkpoint file {path!r} does not exist: expected the path of an "
                         ".npz or .safetensors file, a released weight name such as "
                         "'imagenet21k+imagenet2012' (`vit weights list` shows them), an "
                         "https:// URL or hf://ORG/REPO")
    data = _read_bytes(path)
    file_format = detect_format(data)
    if file_format is None:
        raise ValueError(
            f"{path!r} is not a weight file this library reads: expected an .npz archive "
            f"(starts with 'PK') or a .safetensors file (8-byte header size, then JSON), "
            f"got {len(data)} bytes starting with {data[:8]!r}")
    try:
        tensors = _read_npz(data) if file_format == "npz" else _read_safetensors(data)
    except ValueError as error:
        raise ValueError(f"cannot read {file_format} file {path!r}: {error}") from None
    if not tensors:
        raise ValueError(f"{file_format} file {path!r} holds no tensors")
    return file_format, tensors


def integrity_problem(path: str) -> str | None:
    """Why a local weight file is truncated or corrupt, or None when it is intact.

    Args:
        path: a local `.npz` or `.safetensors` file.

    Returns:
        None, or the problem in words. Checked without loading the tensors: an `.npz` must
        be a zip whose every member is a `.npy` with a matching CRC; a `.safetensors` file
        must have a JSON header whose tensors end exactly at the end of the file.
    """
    with open(path, "rb") as file:
        head = file.read(9)
    if head[:4] in ZIP_MAGIC:
        return _npz_problem(path)
    if len(head) == 9 and head[8:9] == b"{":  # 8-byte header size, then the JSON header
        return _safetensors_problem(path)
    return (f"expected an .npz archive or a .safetensors file, got {os.path.getsize(path)} "
            f"bytes starting with {head[:8]!r}")


def _npz_problem(path: str) -> str | None:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if not names or not all(name.endswith(".npy") for name in names):
                return f"zip archive holds {names[:3]}..., expected .npy arrays"
            bad = archive.testzip()
    except Exception as error:  # zipfile/zlib raise many kinds on corrupt data
        return f"truncated or corrupt .npz archive ({type(error).__name__}: {error})"
    return f"member {bad!r} of the .npz archive fails its CRC check" if bad else None


def _safetensors_problem(path: str) -> str | None:
    size = os.path.getsize(path)
    with open(path, "rb") as file:
        (header_size,) = struct.unpack("<Q", file.read(8))
        if header_size > size - 8:
            return f"header of {header_size} bytes does not fit in a {size}-byte file"
        try:
            header = json.loads(file.read(header_size))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            return f"unreadable .safetensors header ({error})"
    try:
        ends = [int(entry["data_offsets"][1]) for name, entry in header.items()
                if name != "__metadata__"]
    except (AttributeError, TypeError, IndexError, KeyError, ValueError) as error:
        return f"malformed .safetensors header ({type(error).__name__}: {error})"
    data_bytes = size - 8 - header_size
    if max(ends, default=0) != data_bytes:
        return (f"the header describes {max(ends, default=0)} bytes of tensors, the file holds "
                f"{data_bytes}")
    return None


def _read_npz(data: bytes) -> dict[str, np.ndarray]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            not_arrays = [name for name in archive.namelist() if not name.endswith(".npy")]
        if not_arrays:  # e.g. a PyTorch zip checkpoint (archive/data.pkl): pickle, refused
            raise ValueError(f"zip archive member {not_arrays[0]!r} is not a .npy array: "
                             "expected an .npz of arrays (pickle-based PyTorch checkpoints are "
                             "refused: convert them to .safetensors)")
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            tensors = {name: archive[name] for name in archive.files}
    except ValueError as error:
        if "allow_pickle" in str(error):  # numpy's message for object arrays
            raise ValueError(f"{error} (pickled objects are refused)") from None
        if "not a .npy array" in str(error):
            raise
        raise ValueError(f"truncated or corrupt .npz archive ({error})") from None
    except (zipfile.BadZipFile, EOFError, OSError, KeyError, struct.error) as error:
        raise ValueError(f"truncated or corrupt .npz archive ({type(error).__name__}: {error})"
                         ) from None
    for name, array in tensors.items():
        if array.dtype.kind not in "fiu":
            raise ValueError(f"tensor {name!r} has dtype {array.dtype}, expected a number type")
    return tensors


def _read_safetensors(data: bytes) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load

    try:
        return load(data)
    except (SafetensorError, json.JSONDecodeError, TypeError) as error:
        raise ValueError(f"truncated or corrupt .safetensors file ({error})") from None


def write_npz(path: str, tensors: dict[str, np.ndarray]) -> None:
    """Writes `tensors` as an uncompressed `.npz`, atomically: a temp file, then a rename.

    Args:
        path: destination (local or `gs://`); written exactly there, no suffix added.
        tensors: name -> array.
    """
    buffer = io.BytesIO()
    np.savez(buffer, **tensors)
    atomic.write_bytes(path, buffer.getvalue())
