"""`vit serve`: a trained model over HTTP, a web page and TF Serving's REST API
(`vit_app.inference.server`), bound to 127.0.0.1 unless --host says otherwise. The flags are
`vit.commands.serve`'s.
"""

from __future__ import annotations

import argparse
import os
import re

from vit_app import console
from vit_app.inference import classifier
from vit_app.inference.server import ServeOptions, create_app, running

LOOPBACK = ("127.0.0.1", "localhost", "::1")
# Host headers a loopback server (127.0.0.1, localhost or ::1) answers: a web page elsewhere
# that re-points its own domain at the loopback address (DNS rebinding) sends its domain, and is
# refused. An IPv6 literal keeps its brackets in a Host header.
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"]


def model_name(path: str) -> str:
    """A URL-safe name for the model at `path`: its run folder for files named model*, else
    the file or folder name without extension."""
    path = os.path.normpath(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    if stem.startswith("model") or stem == "saved_model":
        stem = os.path.basename(os.path.dirname(os.path.abspath(path))) or stem
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.") or "model"


def options_from(args: argparse.Namespace):
    """The `ServeOptions` of the command line, checked."""
    if not 1 <= args.port <= 65535:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    if args.max_request_mb <= 0:
        raise ValueError(f"--max-request-mb must be > 0, got {args.max_request_mb}")
    for flag, value in (("--max-batch", args.max_batch), ("--queue-size", args.queue_size),
                        ("--max-instances", args.max_instances)):
        if value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    if args.batch_timeout_ms < 0:
        raise ValueError(f"--batch-timeout-ms must be >= 0, got {args.batch_timeout_ms}")
    for flag, value in (("--max-wait-ms", args.max_wait_ms),
                        ("--keep-alive-seconds", args.keep_alive_seconds)):
        if value <= 0:
            raise ValueError(f"{flag} must be > 0, got {value}")
    if args.drain_seconds < 0:
        raise ValueError(f"--drain-seconds must be >= 0, got {args.drain_seconds}")
    return ServeOptions(max_batch=args.max_batch, batch_timeout_ms=args.batch_timeout_ms,
                        queue_size=args.queue_size, max_wait_ms=args.max_wait_ms,
                        max_instances=args.max_instances,
                        max_request_bytes=int(args.max_request_mb * 2**20))


def run(args: argparse.Namespace) -> int:
    """Runs `vit serve` until SIGTERM or Ctrl+C, answers the requests in flight, returns 0."""
    options = options_from(args)
    name = args.name or model_name(args.model)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"--name may hold letters, digits, '_', '.' and '-', got {name!r}")
    model = classifier.load(args.model, args.weights, args.labels, args.preprocessing)
    local = args.host in LOOPBACK
    app = create_app(model, name, options, allowed_hosts=LOOPBACK_HOSTS if local else None)
    host = f"[{args.host}]" if ":" in args.host else args.host
    size = "x".join(map(str, model.image_size)) if model.image_size else "any size"
    console.say(f"Serving {name!r} ({model.format}, {size}, {model.num_classes} classes) on "
                f"http://{host}:{args.port}/  (POST /v1/models/{name}:predict; Ctrl+C stops)")
    if args.host not in LOOPBACK:
        console.say(f"Note: listening on {args.host}, reachable from other machines; there is no "
                    "authentication.")
    running.run_until_stopped(app, args.host, args.port, drain_seconds=args.drain_seconds,
                              keep_alive_seconds=args.keep_alive_seconds, verbose=args.verbose)
    console.say("vit serve: stopped")
    return 0
