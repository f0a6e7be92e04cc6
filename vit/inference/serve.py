"""Serve a trained model over HTTP: a web page and TF Serving's REST API.

Examples:
  vit serve --model saved_models/digits_tiny/model.keras
  vit serve --model saved_models/digits_tiny/saved_model --port 8501
  vit serve --model saved_models/digits_tiny/model.tflite --name digits
  vit serve --model B/16 --weights imagenet21k+imagenet2012

Open http://127.0.0.1:8500/ to drop an image and see the top-5 classes with the
attention-rollout heatmap (a .keras model or pretrained weights; exported files keep no
attention maps). Clients of TF Serving call POST /v1/models/NAME:predict with
{"instances": [...]} of float pixels [H, W, 3] in 0..255, or with
{"signature_name": "serve_bytes", "instances": [{"b64": "..."}]} of encoded images.

The server binds to 127.0.0.1 (this machine only) unless --host says otherwise; it has no
authentication, so put it behind a proxy that has before opening it to a network. On a
loopback address (127.0.0.1, localhost, ::1) it answers only Host headers naming one.
SIGTERM or Ctrl+C stops it: no new connections, the requests in flight are answered (up to
--drain-seconds), then it exits with status 0.
"""

from __future__ import annotations

import argparse
import os
import re

from vit import console

LOOPBACK = ("127.0.0.1", "localhost", "::1")
# Host headers a loopback server (127.0.0.1, localhost or ::1) answers: a web page elsewhere
# that re-points its own domain at the loopback address (DNS rebinding) sends its domain, and is
# refused. An IPv6 literal keeps its brackets in a Host header.
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Registers the `vit serve` options."""
    parser.add_argument("--model", required=True, help="a .keras file, a SavedModel directory, "
                        "a .tflite or .onnx file; with --weights, an architecture (B/16, ...)")
    parser.add_argument("--weights", help="pretrained weights for the --model architecture: a "
                        "name from `vit weights list`, an https:// URL, hf://ORG/REPO or a file")
    parser.add_argument("--labels", help="labels.txt (default: next to the model)")
    parser.add_argument("--name", help="the model's name in /v1/models/NAME (default: the "
                        "folder `vit train` wrote it to, else the file name)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=8500, help="TCP port (default: 8500)")
    parser.add_argument("--max-batch", type=int, default=16,
                        help="most images per model call (default: 16)")
    parser.add_argument("--batch-timeout-ms", type=float, default=5.0,
                        help="how long a request waits for others to batch with (default: 5)")
    parser.add_argument("--queue-size", type=int, default=64,
                        help="most requests waiting; more get HTTP 503 (default: 64)")
    parser.add_argument("--max-request-mb", type=float, default=8.0,
                        help="largest request body in MB; larger get HTTP 413 (default: 8)")
    parser.add_argument("--max-instances", type=int, default=64,
                        help="most images in one request; more get HTTP 413 (default: 64)")
    parser.add_argument("--drain-seconds", type=int, default=20,
                        help="on SIGTERM or Ctrl+C, how long to keep answering the requests "
                        "in flight before exiting (default: 20, within the usual 30 s grace "
                        "period)")


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
    from vit.inference.server import ServeOptions

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
    if args.drain_seconds < 0:
        raise ValueError(f"--drain-seconds must be >= 0, got {args.drain_seconds}")
    return ServeOptions(max_batch=args.max_batch, batch_timeout_ms=args.batch_timeout_ms,
                        queue_size=args.queue_size, max_instances=args.max_instances,
                        max_request_bytes=int(args.max_request_mb * 2**20))


def run(args: argparse.Namespace) -> int:
    """Runs `vit serve` until SIGTERM or Ctrl+C, answers the requests in flight, returns 0."""
    from vit.inference import classifier
    from vit.inference.server import create_app, running

    options = options_from(args)
    name = args.name or model_name(args.model)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"--name may hold letters, digits, '_', '.' and '-', got {name!r}")
    model = classifier.load(args.model, args.weights, args.labels)
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
                              verbose=args.verbose)
    console.say("vit serve: stopped")
    return 0
