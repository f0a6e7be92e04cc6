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

from vit.commands.checks import (add_preprocessing_argument, check_model,
                                 check_preprocessing_target)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Registers the `vit serve` options."""
    parser.add_argument("--model", required=True, help="a .keras file, a keras-hub preset "
                        "folder, a SavedModel directory, a .tflite or .onnx file; with --weights, an architecture (B/16, ...)")
    parser.add_argument("--weights", help="pretrained weights for the --model architecture: a "
                        "name from `vit weights list`, an https:// URL, hf://ORG/REPO or a file")
    parser.add_argument("--labels", help="labels.txt (default: next to the model)")
    add_preprocessing_argument(parser)
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
                        help="most predict requests in the server at once (read, decoded, "
                        "waiting or in the model); more get HTTP 503 with Retry-After at once "
                        "(default: 64)")
    parser.add_argument("--max-wait-ms", type=float, default=500.0,
                        help="a request that has not reached the model this long after it "
                        "arrived gets HTTP 503 instead of a late answer (default: 500)")
    parser.add_argument("--keep-alive-seconds", type=float, default=75.0,
                        help="how long an idle keep-alive connection stays open; keep it above "
                        "the idle timeout of a proxy or client pool in front (default: 75)")
    parser.add_argument("--max-request-mb", type=float, default=8.0,
                        help="largest request body in MB; larger get HTTP 413 (default: 8)")
    parser.add_argument("--max-instances", type=int, default=64,
                        help="most images in one request; more get HTTP 413 (default: 64)")
    parser.add_argument("--drain-seconds", type=int, default=20,
                        help="on SIGTERM or Ctrl+C, how long to keep answering the requests "
                        "in flight before exiting (default: 20, within the usual 30 s grace "
                        "period)")


def check(args: argparse.Namespace) -> None:
    """Checks the model before any framework is imported."""
    check_model(args.model, args.weights)
    check_preprocessing_target(args.model, args.preprocessing, args.weights)


def run(args: argparse.Namespace) -> int:
    """Runs `vit serve` until SIGTERM or Ctrl+C, answers the requests in flight, returns 0."""
    from vit_app.inference import serve

    return serve.run(args)
