"""Load on `vit serve`: a concurrency sweep of asynchronous keep-alive clients.

    vit train && python benchmarks/serve_load.py
        [--model saved_models/digits_tiny/model.keras] [--clients 8,64,256,1024]
        [--duration 30] [--server-cores 0] [--client-cores 1] [--serve-args "--max-batch 16"]
        [--ignore-retry-after] [--json results.json]
    python benchmarks/serve_load.py --variant S/16 --clients 8,64 --serve-args "--max-wait-ms 5000"

Starts `vit serve` as its own process pinned to `--server-cores`, pins this process (the
clients) to `--client-cores`, and for each number of clients runs that many asynchronous
HTTP/1.1 clients for `--duration` seconds, each over its own keep-alive connection, sending
one request after the other: half send one PNG file to `serve_bytes`, half four float images
to `serving_default`. `--variant` serves a randomly initialised official variant instead
(where the model, not HTTP, takes most of the time). A client answered 503 waits as its `Retry-After` says (unless
`--ignore-retry-after`), as a well-behaved client does, then goes on.

Prints a Markdown table per step: answered requests/s (status 200), p50/p99 of answered
requests, the share answered 503 and the p99 of those refusals, other statuses, connections
dropped without an answer (closed or reset after a request was sent), failed connects, the
server's RSS before and after, its own count of requests refused at the door and expired
(admitted, then too late for the model), and whether `/healthz` answers afterwards. The last
line is the answered/s of the largest step over the smallest. Exits 1 if a promise of `vit
serve` failed: a dropped connection or a server that stopped answering; with `--check`, also a
p99 of answered requests over `--max-p99-ms` or no 503 at the largest step; with
`--min-ratio R`, a step answering fewer than R times the requests/s of the first.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import io
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np

HOST = "127.0.0.1"
FLOAT_IMAGES_PER_REQUEST = 4  # the serving_default half of the clients sends this many


@dataclasses.dataclass
class Tally:
    """What the clients of one step saw."""

    answered_s: list = dataclasses.field(default_factory=list)  # latencies of 200s
    refused_s: list = dataclasses.field(default_factory=list)  # latencies of 503s
    other: dict = dataclasses.field(default_factory=dict)  # status -> count
    dropped: int = 0  # connection closed or reset after a request was sent
    connect_failed: int = 0


def request_bytes(name: str, image_size, signature: str, seed: int) -> bytes:
    """One predict request (headers and JSON body) for `signature`, as sent on the wire."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    if signature == "serve_bytes":
        pixels = rng.integers(0, 256, (*image_size, 3)).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "PNG")
        instances = [{"b64": base64.b64encode(buffer.getvalue()).decode()}]
        body = {"signature_name": signature, "instances": instances}
    else:
        pixels = rng.integers(0, 256, (FLOAT_IMAGES_PER_REQUEST, *image_size, 3))
        body = {"instances": pixels.astype(float).tolist()}
    data = json.dumps(body).encode()
    head = (f"POST /v1/models/{name}:predict HTTP/1.1\r\nHost: {HOST}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
    return head.encode() + data


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict]:
    """The status and headers of one HTTP/1.1 response; its body is read and dropped."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            key, value = line.split(":", 1)
            headers[key.strip().lower()] = value.strip()
    await reader.readexactly(int(headers.get("content-length", 0)))
    return status, headers


async def client(port: int, request: bytes, stop_at: float, tally: Tally,
                 honor_retry_after: bool) -> None:
    """Sends `request` again and again over one keep-alive connection until `stop_at`."""
    loop = asyncio.get_running_loop()
    reader = writer = None
    while loop.time() < stop_at:
        if writer is None:
            try:
                reader, writer = await asyncio.open_connection(HOST, port)
            except OSError:
                tally.connect_failed += 1
                await asyncio.sleep(0.1)
                continue
        start = loop.time()
        try:
            writer.write(request)
            status, headers = await read_response(reader)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            tally.dropped += 1
            writer.close()
            writer = None
            continue
        elapsed = loop.time() - start
        if status == 200:
            tally.answered_s.append(elapsed)
        elif status == 503:
            tally.refused_s.append(elapsed)
        else:
            tally.other[status] = tally.other.get(status, 0) + 1
        if headers.get("connection", "").lower() == "close":
            writer.close()
            writer = None
        if status == 503 and honor_retry_after:
            await asyncio.sleep(min(float(headers.get("retry-after", 1)), stop_at - loop.time()))
    if writer is not None:
        writer.close()


async def step(port: int, requests: list[bytes], clients: int, duration: float,
               honor_retry_after: bool) -> Tally:
    """`clients` clients for `duration` seconds, client i sending requests[i % len]."""
    tally = Tally()
    stop_at = asyncio.get_running_loop().time() + duration
    await asyncio.gather(*(client(port, requests[i % len(requests)], stop_at, tally,
                                  honor_retry_after) for i in range(clients)))
    return tally


def percentile_ms(values: list, q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q)) if values else float("nan")


def rss_mb(pid: int) -> float:
    """The resident memory of process `pid` in MB (Linux)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def health(port: int, timeout: float = 10.0) -> dict | None:
    """GET /healthz's answer if it is 200 within `timeout` seconds, else None."""
    import httpx

    try:
        response = httpx.get(f"http://{HOST}:{port}/healthz", timeout=timeout)
    except httpx.HTTPError:
        return None
    return response.json() if response.status_code == 200 else None


def start_server(args, port: int) -> subprocess.Popen:
    """`vit serve` on `port`, pinned to `--server-cores`, once /healthz answers."""
    command = [sys.executable, "-m", "vit", "serve", "--model", args.model, "--name", "model",
               "--port", str(port), *shlex.split(args.serve_args)]
    cores = parse_cores(args.server_cores)
    server = subprocess.Popen(command, preexec_fn=lambda: os.sched_setaffinity(0, cores))
    deadline = time.monotonic() + 300
    while health(port, timeout=1.0) is None:
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(f"`{shlex.join(command)}` did not start")
        time.sleep(0.5)
    return server


def parse_cores(text: str) -> set[int]:
    return {int(core) for core in text.split(",")}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def row(clients: int, tally: Tally, duration: float, before: dict, after: dict) -> dict:
    """One step's figures; `before` and `after` hold the server's RSS and /healthz answer."""
    answered, refused = len(tally.answered_s), len(tally.refused_s)
    total = answered + refused + sum(tally.other.values())
    return {"clients": clients, "answered_per_s": answered / duration,
            "p50_ms": percentile_ms(tally.answered_s, 50),
            "p99_ms": percentile_ms(tally.answered_s, 99),
            "refused_share": refused / total if total else 0.0,
            "refused_p99_ms": percentile_ms(tally.refused_s, 99),
            "other_statuses": tally.other, "dropped": tally.dropped,
            "connect_failed": tally.connect_failed,
            "refused_at_door": _grown(before, after, "refused"),
            "expired": _grown(before, after, "expired"), "rss_before_mb": before["rss_mb"],
            "rss_after_mb": after["rss_mb"], "healthy_after": after["health"] is not None}


def _grown(before: dict, after: dict, count: str) -> int | None:
    """How much the server's count of /healthz grew over the step (None if it did not say)."""
    if before["health"] is None or after["health"] is None:
        return None
    return after["health"][count] - before["health"][count]


def print_row(result: dict) -> None:
    print(f"| {result['clients']} | {result['answered_per_s']:.0f} | {result['p50_ms']:.0f} | "
          f"{result['p99_ms']:.0f} | {100 * result['refused_share']:.1f}% | "
          f"{result['refused_p99_ms']:.1f} | {result['refused_at_door']} | "
          f"{result['expired']} | {result['other_statuses'] or 0} | "
          f"{result['dropped']} | {result['connect_failed']} | "
          f"{result['rss_before_mb']:.0f} -> {result['rss_after_mb']:.0f} | "
          f"{'yes' if result['healthy_after'] else 'NO'} |", flush=True)


def variant_file(variant: str, folder: str) -> str:
    """A randomly initialised official `variant` saved as a .keras file in `folder`."""
    import vit_keras

    path = os.path.join(folder, "model.keras")
    vit_keras.create_model(variant).save(path)
    return path


def sweep(args) -> list[dict]:
    """Runs every step of `--clients` against one server; returns their rows."""
    from vit_app.inference import classifier

    image_size = classifier.load(args.model).image_size
    requests = [request_bytes("model", image_size, signature, seed)
                for seed, signature in enumerate(["serve_bytes", "serving_default"] * 4)]
    port = free_port()
    server = start_server(args, port)
    os.sched_setaffinity(0, parse_cores(args.client_cores))
    print("| clients | answered/s | p50 ms | p99 ms | 503 share | 503 p99 ms | refused at door "
          "| expired | other | dropped | connect failed | server RSS MB | healthy after |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    results = []
    try:
        asyncio.run(step(port, requests, 4, 3.0, True))  # warm-up
        for clients in [int(count) for count in args.clients.split(",")]:
            before = {"rss_mb": rss_mb(server.pid), "health": health(port)}
            tally = asyncio.run(step(port, requests, clients, args.duration,
                                     not args.ignore_retry_after))
            after = {"rss_mb": rss_mb(server.pid), "health": health(port)}
            results.append(row(clients, tally, args.duration, before, after))
            print_row(results[-1])
            time.sleep(args.pause)
    finally:
        server.terminate()
        server.wait(60)
    return results


def failures(results: list[dict], args) -> list[str]:
    """The promises a sweep broke (see the module docstring)."""
    broken = [f"{r['clients']} clients: {r['dropped']} connections dropped" for r in results
              if r["dropped"]]
    broken += [f"{r['clients']} clients: /healthz did not answer afterwards" for r in results
               if not r["healthy_after"]]
    if args.check:
        broken += [f"{r['clients']} clients: p99 {r['p99_ms']:.0f} ms > {args.max_p99_ms} ms"
                   for r in results if not r["p99_ms"] <= args.max_p99_ms]
        if not results[-1]["refused_share"]:
            broken.append(f"{results[-1]['clients']} clients: no request was answered 503")
    if args.min_ratio:
        first = results[0]["answered_per_s"]
        broken += [f"{r['clients']} clients: {r['answered_per_s']:.0f} answered/s < "
                   f"{args.min_ratio} x {first:.0f}" for r in results
                   if r["answered_per_s"] < args.min_ratio * first]
    return broken


def main(argv=None, report=None) -> int:
    """Runs the sweep; `report`, if given, receives the rows (a test's way in)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="saved_models/digits_tiny/model.keras")
    parser.add_argument("--clients", default="8,64,256,1024", help="the steps of the sweep")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per step")
    parser.add_argument("--pause", type=float, default=2.0, help="seconds between steps")
    parser.add_argument("--server-cores", default="0", help="CPU cores of `vit serve`")
    parser.add_argument("--client-cores", default="1", help="CPU cores of the clients")
    parser.add_argument("--serve-args", default="", help="more `vit serve` flags")
    parser.add_argument("--ignore-retry-after", action="store_true",
                        help="clients answered 503 send their next request at once")
    parser.add_argument("--check", action="store_true", help="also fail on a p99 over "
                        "--max-p99-ms and a largest step without 503s")
    parser.add_argument("--max-p99-ms", type=float, default=1000.0)
    parser.add_argument("--min-ratio", type=float, help="also fail on a step answering fewer "
                        "than this times the requests/s of the first (the issue's bar: 0.9)")
    parser.add_argument("--variant", help="serve this official variant (random weights)")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 1024 clients, 1024 sockets
    folder = tempfile.TemporaryDirectory()
    if args.variant:
        args.model = variant_file(args.variant, folder.name)
    print(f"{args.variant or args.model}: `vit serve {args.serve_args}` on cores {args.server_cores}, clients "
          f"on {args.client_cores}, {args.duration:.0f} s per step, half 1 PNG to serve_bytes, "
          f"half {FLOAT_IMAGES_PER_REQUEST} float images to serving_default\n")
    with folder:
        results = sweep(args)
    if report is not None:
        report(results)
    print(f"\nanswered/s at {results[-1]['clients']} clients / at {results[0]['clients']}: "
          f"{results[-1]['answered_per_s'] / results[0]['answered_per_s']:.2f}x")
    if args.json:
        with open(args.json + ".tmp", "w") as file:
            json.dump(results, file, indent=1)
        os.replace(args.json + ".tmp", args.json)
    broken = failures(results, args)
    for line in broken:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
