"""How much of a .tflite graph XNNPACK takes, and its latency with and without XNNPACK.

    python benchmarks/litert_delegation.py saved_models/digits_tiny/model.tflite \
        saved_models/digits_tiny/model_int8.tflite

For each file: the number of XNNPACK partitions (1 = the whole graph is delegated; each
partition is replaced by one DELEGATE node) and the batch-1 latency (best of 5 rounds, each a mean over `--runs`
invocations, 2 threads) with the default XNNPACK delegate, with LiteRT's builtin kernels only, and
with its reference kernels.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

RESOLVERS = {"xnnpack": "AUTO", "builtin": "BUILTIN_WITHOUT_DEFAULT_DELEGATES",
             "reference": "BUILTIN_REF"}


def make_interpreter(path: str, resolver: str, threads: int):
    """A LiteRT interpreter on `path` with the given op resolver, tensors allocated."""
    from ai_edge_litert import interpreter as lite

    resolver_type = getattr(lite.OpResolverType, RESOLVERS[resolver])
    interpreter = lite.Interpreter(model_path=path, num_threads=threads,
                                   experimental_op_resolver_type=resolver_type)
    interpreter.allocate_tensors()
    return interpreter


def latency_ms(interpreter, runs: int) -> float:
    """Best of 5 rounds of the mean time of one invocation on a random input."""
    details = interpreter.get_input_details()[0]
    images = np.random.default_rng(0).uniform(0, 255, details["shape"])
    interpreter.set_tensor(details["index"], images.astype(details["dtype"]))
    for _ in range(10):
        interpreter.invoke()
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(runs):
            interpreter.invoke()
        rounds.append((time.perf_counter() - start) / runs)
    return 1e3 * min(rounds)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help=".tflite files")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args(argv)
    for path in args.paths:
        timings = {name: latency_ms(make_interpreter(path, name, args.threads), args.runs)
                   for name in RESOLVERS}
        partitions = [op["op_name"] for op in
                      make_interpreter(path, "xnnpack", args.threads)._get_ops_details()]
        print(f"{path}: {partitions.count('DELEGATE')} XNNPACK partition(s); "
              + ", ".join(f"{name} {ms:.3f} ms" for name, ms in timings.items()))


if __name__ == "__main__":
    main()
