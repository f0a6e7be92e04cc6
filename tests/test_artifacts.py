"""The test artifacts' folder (tests/artifacts.py): the JAX compilation cache every test process
shares stays within its bound, kept when a run starts, not by JAX on every write."""

import os

import artifacts


def test_the_jax_cache_keeps_its_newest_entries_within_its_bound(tmp_path):
    folder = tmp_path / artifacts.JAX_CACHE
    folder.mkdir()
    for age in range(6):  # entry-0 is the newest
        path = folder / f"entry-{age}-cache"
        path.write_bytes(b"x" * 100)
        os.utime(path, (1_000_000 - age, 1_000_000 - age))
    artifacts._bound_jax_cache(folder, limit=350)
    assert sorted(path.name for path in folder.iterdir()) == [
        "entry-0-cache", "entry-1-cache", "entry-2-cache"]
    artifacts._bound_jax_cache(tmp_path / "absent", limit=0)  # no cache yet: nothing to do


def test_jax_itself_never_scans_the_cache():
    """A bound given to JAX makes every write read every entry's time stamp under one lock."""
    assert os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] == "-1"
    assert os.environ["JAX_COMPILATION_CACHE_DIR"].endswith(artifacts.JAX_CACHE)
