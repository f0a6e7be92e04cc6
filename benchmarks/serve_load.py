"""Load on `vit serve`: concurrent clients over loopback HTTP, batching on and off side by side.

    vit train && python benchmarks/serve_load.py
        [--model saved_models/digits_tiny/model.keras] [--clients 8] [--requests 50]
        [--max-batch 16] [--signatures serving_default,serve_bytes]
    python benchmarks/serve_load.py --variant S/16 --signatures serve_bytes --requests 10

Serves the model in this process (uvicorn on a free loopback port, the app `vit serve` runs),
then each of `--clients` threads sends `--requests` predict requests, one image each, over its
own keep-alive connection, for both signatures (`serving_default` float pixels, `serve_bytes`
PNG files) and with batching on (`--max-batch`) and off (1). `--variant` serves a
randomly initialised official variant instead (where the model, not HTTP, takes most of the
time). Prints a Markdown table of errors, p50/p99 latency, throughput and the mean batch the
model ran, and the throughput ratio of batching on over off.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def request_bodies(image_size, signature: str, count: int, seed: int = 0) -> list[dict]:
    """`count` predict requests of one random image each, for `signature`."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    bodies = []
    for _ in range(count):
        pixels = rng.integers(0, 256, (*image_size, 3)).astype(np.uint8)
        if signature == "serve_bytes":
            buffer = io.BytesIO()
            Image.fromarray(pixels).save(buffer, "PNG")
            instance = {"b64": base64.b64encode(buffer.getvalue()).decode()}
            bodies.append({"signature_name": signature, "instances": [instance]})
        else:
            bodies.append({"instances": [pixels.astype(np.float32).tolist()]})
    return bodies


def load(url: str, name: str, bodies: list[dict], clients: int) -> dict:
    """Sends `bodies` from `clients` threads (an equal share each, over one connection each).

    Returns:
        {'requests', 'errors', 'p50_ms', 'p99_ms', 'requests_per_s', 'error_samples'}.
    """
    import httpx

    latencies, errors = [], []
    lock = threading.Lock()

    def client(share):
        with httpx.Client(base_url=url, timeout=120) as session:
            for body in share:
                start = time.perf_counter()
                response = session.post(f"/v1/models/{name}:predict", json=body)
                elapsed = time.perf_counter() - start
                with lock:
                    latencies.append(elapsed)
                    if response.status_code != 200:
                        errors.append(f"{response.status_code} {response.text[:120]}")

    threads = [threading.Thread(target=client, args=(bodies[i::clients],))
               for i in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    milliseconds = np.asarray(latencies) * 1000
    return {"requests": len(latencies), "errors": len(errors), "error_samples": errors[:3],
            "p50_ms": float(np.percentile(milliseconds, 50)),
            "p99_ms": float(np.percentile(milliseconds, 99)),
            "requests_per_s": len(latencies) / wall}


def measure(model, signature: str, clients: int, requests: int, max_batch: int,
            batch_timeout_ms: float = 5.0) -> dict:
    """`load` on a fresh server of `model` with `max_batch`, after a warm-up round."""
    from localhost import served

    from vit.inference.server import ServeOptions, create_app

    options = ServeOptions(max_batch=max_batch, batch_timeout_ms=batch_timeout_ms,
                           queue_size=4 * clients)
    app = create_app(model, "model", options)
    with served(app) as url:
        load(url, "model", request_bodies(model.image_size, signature, clients, seed=1), clients)
        app.state.batcher.batch_sizes.clear()
        result = load(url, "model", request_bodies(model.image_size, signature,
                                                   clients * requests), clients)
        sizes = list(app.state.batcher.batch_sizes)
    result["mean_batch"] = float(np.mean(sizes)) if sizes else 0.0
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="saved_models/digits_tiny/model.keras")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=50, help="per client")
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--variant", help="serve this official variant (random weights)")
    parser.add_argument("--signatures", default="serving_default,serve_bytes")
    args = parser.parse_args(argv)
    from vit.inference import classifier

    if args.variant:
        import vit_keras

        model = classifier.from_keras_model(vit_keras.create_model(args.variant), args.variant)
    else:
        model = classifier.load(args.model)
    print(f"{args.variant or args.model}: {args.clients} clients x {args.requests} requests, "
          "1 image each, loopback HTTP\n")
    print("| signature | batching | errors | p50 ms | p99 ms | requests/s | mean batch |")
    print("|---|---|---|---|---|---|---|")
    for signature in args.signatures.split(","):
        rates = {}
        for max_batch in (args.max_batch, 1):
            result = measure(model, signature, args.clients, args.requests, max_batch)
            rates[max_batch] = result["requests_per_s"]
            print(f"| {signature} | max {max_batch} | {result['errors']} | "
                  f"{result['p50_ms']:.1f} | {result['p99_ms']:.1f} | "
                  f"{result['requests_per_s']:.0f} | {result['mean_batch']:.1f} |", flush=True)
        print(f"| {signature} | on / off | | | | {rates[args.max_batch] / rates[1]:.2f}x | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
