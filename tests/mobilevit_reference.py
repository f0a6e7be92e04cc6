"""The seeded weights of MobileViT's parity vectors, drawn the same way by their maker
(tests/data/make_mobilevit_vectors.py, with timm) and by the tests (without it): every float
tensor of timm's state dict in order from one generator, each at a scale that keeps the
signal alive through the network (kernels 1/sqrt(fan-in), norm scales near 1)."""

import json
import os

import numpy as np

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
KEYS = os.path.join(DATA, "mobilevit_keys.json")
VECTORS = os.path.join(DATA, "mobilevit_vectors.npz")


def seeded_state(keys: list, seed: int = 0) -> dict:
    """{key: float32 array} of timm's (key, shape) list; `num_batches_tracked` stays 0."""
    rng, state = np.random.default_rng(seed), {}
    for key, shape in keys:
        shape = tuple(shape)
        if key.endswith("num_batches_tracked"):
            state[key] = np.zeros(shape, np.int64)
        elif key.endswith("running_var"):
            state[key] = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        elif len(shape) >= 2:
            fan_in = int(np.prod(shape[1:]))
            state[key] = (rng.normal(0.0, 1.0, shape) / np.sqrt(fan_in)).astype(np.float32)
        elif key.endswith("weight"):
            state[key] = (1.0 + rng.normal(0.0, 0.1, shape)).astype(np.float32)
        else:
            state[key] = rng.normal(0.0, 0.1, shape).astype(np.float32)
    return state


def inputs(size: int, seed: int) -> np.ndarray:
    """Two images [2, size, size, 3] in [0, 1] (NHWC), the vectors' inputs."""
    return np.random.default_rng(seed).uniform(0.0, 1.0, (2, size, size, 3)).astype(np.float32)


def keys_of(name: str) -> list:
    """timm's state-dict (key, shape) list of variant `name`, as the maker wrote it."""
    with open(KEYS) as file:
        return json.load(file)[name]
