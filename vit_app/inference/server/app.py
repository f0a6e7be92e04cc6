"""The `vit serve` web application (Starlette, ASGI): TF Serving's REST API, the page, health.

Routes:
- `GET /`: the page (drop an image, see the top-5 classes and where the model looks);
  its script and style under `/static/`, all served from this package, no CDN.
- `POST /v1/models/NAME[/versions/1]:predict`, `GET /v1/models/NAME[/versions/1]` (status),
  `GET /v1/models/NAME[/versions/1]/metadata`: TF Serving's REST API (see `tf_serving`).
- `GET /api/model`, `POST /api/explain` (an image file as the body): what the page uses.
- `GET /healthz`.

Every error is JSON `{"error": "..."}` with a 4xx status for bad input (413 for a body over the
limit or an image over the pixel limit, 503 with Retry-After when the server holds as much as
it may, see `admission`); a failure inside the model answers 500 for that request only.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tensorflow as tf
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Route

from vit_app import images
from vit_app.inference import classifier as classifiers
from vit_app.inference import inference_task as tasks
from vit_app.inference.server import tf_serving
from vit_app.inference.server.admission import (RETRY_AFTER_S, Admission, Busy, Door, Ticket,
                                             busy_message)
from vit_app.inference.server.batching import Batcher, Expired, QueueFull, ShuttingDown

PAGE_DIR = os.path.join(os.path.dirname(__file__), "page")
ASSETS = {"page.js": "text/javascript", "page.css": "text/css"}  # what /static/ serves,
TASK_SCRIPT = "task.js"  # and the task's own drawing where it has one (`page_script`)
# A request whose image cannot be used: 413 for one over the pixel limit, 400 for the others.
STATUS_OF_IMAGE_PROBLEM = {"too_large": 413, "unreadable": 400, "not_an_image": 400,
                           "corrupt": 400, "channels": 400}
# Requests parsed and decoded at once, each on its own thread: bounds the memory of large
# images. A pool of its own costs the event loop less per hand-off than anyio's.
DECODE_SLOTS = 2
# Answers with more numbers than this are encoded on a worker thread, smaller ones on the event
# loop (handing work to a thread and back costs more than encoding a few thousand numbers).
INLINE_ANSWER_VALUES = 16384
MODEL_PATH = re.compile(r"^(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+))?"
                        r"(?P<suffix>/metadata|:[A-Za-z]+)?$")
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' blob: data:; "
                               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """How `vit serve` admits and batches requests.

    Attributes:
        max_batch: most images per model call.
        batch_timeout_ms: how long a request waits for others to share its batch.
        queue_size: most predict requests in the server at once (being read, decoded,
            waiting or in the model); more are answered 503 at once.
        max_wait_ms: longest time a request may take to reach the model; later it is
            answered 503 instead.
        max_request_bytes: largest request body; larger ones are answered 413.
        max_instances: most images in one request; more are answered 413 (a small body can
            carry many tiny files, each decoded at the model's size).
    """

    max_batch: int = 16
    batch_timeout_ms: float = 5.0
    queue_size: int = 64
    max_wait_ms: float = 500.0
    max_request_bytes: int = 8 * 2**20
    max_instances: int = 64

    def __post_init__(self):
        if self.batch_timeout_ms >= self.max_wait_ms:
            raise ValueError(f"the batching window (--batch-timeout-ms {self.batch_timeout_ms:g}) "
                             f"must be shorter than the longest wait for the model (--max-wait-ms "
                             f"{self.max_wait_ms:g}), or every request would be refused; raise "
                             "--max-wait-ms or lower --batch-timeout-ms")


class RequestError(Exception):
    """A request the server refuses: HTTP `status` and a message saying why."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def create_app(model: classifiers.Classifier, name: str,
               options: ServeOptions = ServeOptions(),
               allowed_hosts: list[str] | None = None) -> Starlette:
    """The application serving `model` as `name`.

    Args:
        model: the classifier to serve.
        name: its name in the URLs (`/v1/models/NAME:predict`).
        options: queue, batching and size limits.
        allowed_hosts: the Host headers answered (others get 400), e.g. the loopback names for
            a loopback server, so that a web page on another site cannot reach it by DNS
            rebinding; None answers every host.

    Returns:
        A Starlette (ASGI) application; run it with uvicorn.
    """
    service = _Service(model, name, options)
    routes = [
        Route("/", service.page),
        Route("/healthz", service.health),
        Route("/api/model", service.page_model),
        Route("/api/explain", service.explain, methods=["POST"]),
        Route("/v1/models/{path:path}", service.tf_serving, methods=["GET", "POST"]),
        Route("/static/{asset}", service.asset),
    ]
    handlers = {RequestError: _request_error, Busy: _busy, HTTPException: _http_error,
                Exception: _crash}
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)] \
        if allowed_hosts else []
    middleware.append(Middleware(Door, admission=service.admission, is_work=_is_work))
    app = Starlette(routes=routes, exception_handlers=handlers, lifespan=service.lifespan,
                    middleware=middleware)
    app.state.batcher = service.batcher  # its batch sizes show how requests were batched
    app.state.admission = service.admission
    return app


def _is_work(method: str, path: str) -> bool:
    """Whether a request asks for a model call (what admission counts and may refuse)."""
    return method == "POST" and (path.endswith(":predict") or path == "/api/explain")


class _Service:
    """The request handlers around one classifier and its batcher."""

    def __init__(self, model: classifiers.Classifier, name: str, options: ServeOptions):
        self.model, self.name, self.options = model, name, options
        self.task = tasks.get(model.task)
        # Admission bounds the live jobs; expired ones stay queued until the loop skips them.
        self.batcher = Batcher(self._run, options.max_batch, options.batch_timeout_ms,
                               4 * options.queue_size)
        self.admission = Admission(options.queue_size, options.max_wait_ms,
                                   options.batch_timeout_ms)
        self.decoding = ThreadPoolExecutor(DECODE_SLOTS, thread_name_prefix="vit-serve-decode")

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        await run_in_threadpool(self._warm_up)  # before the server takes requests
        # The loaded framework and model are hundreds of thousands of long-lived objects: a
        # full garbage collection walking them stops every thread for about half a second
        # under load. Frozen, they are left out of every collection while the server runs.
        gc.collect()
        gc.freeze()
        await self.batcher.start()
        try:
            yield
        finally:
            await self.batcher.stop()
            self.decoding.shutdown(wait=True)
            gc.unfreeze()  # a process serving more than once collects the old model again

    def _warm_up(self) -> None:
        self.model.warm_up()

    def _run(self, kind: str, inputs: np.ndarray) -> dict:
        """The model call of one batch, on the batcher's thread, answered as its task answers
        (a segmenter: class ids per pixel)."""
        if kind == "encoded":
            outputs = self.model.predict_encoded(inputs)
        else:
            outputs = self.model.predict(inputs)
        return self.task.answer(self.model, kind, inputs, outputs)

    async def page(self, request: Request):
        return FileResponse(os.path.join(PAGE_DIR, "index.html"), headers=PAGE_HEADERS)

    async def asset(self, request: Request):
        asset = request.path_params["asset"]
        if asset == TASK_SCRIPT and self.task.page_script():
            return FileResponse(self.task.page_script(), media_type="text/javascript",
                                headers=PAGE_HEADERS)
        if asset not in ASSETS:
            raise RequestError(404, f"no such file /static/{asset}; the page uses "
                                    f"{sorted(ASSETS)}")
        return FileResponse(os.path.join(PAGE_DIR, asset), media_type=ASSETS[asset],
                            headers=PAGE_HEADERS)

    async def health(self, request: Request):
        load = self.admission.figures()
        if not self.batcher.running:
            return JSONResponse({"status": "unavailable", "model": self.name, **load}, 503)
        return JSONResponse({"status": "ok", "model": self.name, **load})

    async def page_model(self, request: Request):
        size = self.model.image_size
        return JSONResponse({
            "name": self.name, "format": self.model.format, "classes": self.model.num_classes,
            "image_size": list(size) if size else None,
            "task": self.task.name, "verb": self.task.verb,
            "drawing_script": self.task.page_script() is not None,
            **self.task.page_features(self.model),
            "max_request_bytes": self.options.max_request_bytes})

    async def tf_serving(self, request: Request):
        match = MODEL_PATH.match(request.path_params["path"])
        if not match:
            raise RequestError(404, f"no such endpoint {request.url.path!r}; expected "
                                    "/v1/models/NAME, /v1/models/NAME/metadata or "
                                    "POST /v1/models/NAME:predict")
        self._check_model(match["name"], match["version"])
        suffix = match["suffix"]
        if request.method == "POST" and suffix == ":predict":
            return await self._predict(request)
        if request.method == "GET" and suffix in (None, "/metadata"):
            return JSONResponse(tf_serving.model_status() if suffix is None else
                                tf_serving.model_metadata(self.name, self._sample_shape,
                                                          self._serving_outputs()))
        if suffix in (":classify", ":regress"):
            raise RequestError(400, f"{suffix[1:]} takes tf.Example inputs, which an image "
                                    "model has no use for; use :predict")
        allowed = "POST" if suffix == ":predict" else "GET"
        raise RequestError(405 if suffix in (None, "/metadata", ":predict") else 404,
                           f"{request.method} {request.url.path} is not served; expected GET "
                           f"/v1/models/{self.name}[/metadata] or POST "
                           f"/v1/models/{self.name}:predict", {"Allow": allowed})

    def _check_model(self, name: str, version: str | None) -> None:
        if name != self.name:
            raise RequestError(404, f"model {name!r} is not served here; this server serves "
                                    f"{self.name!r} (GET /v1/models/{self.name})")
        if version not in (None, tf_serving.VERSION):
            raise RequestError(404, f"model {name!r} has no version {version!r}; its one "
                                    f"version is {tf_serving.VERSION}")

    async def _predict(self, request: Request) -> JSONResponse:
        with self.admission.admit() as ticket:
            body = await read_body(request, self.options.max_request_bytes)
            kind, inputs, columnar, rows = await self._decode_in_time(self._read_predict, body,
                                                                      ticket)
            outputs = self.task.joined(await self._submit(kind, inputs, ticket), rows)
        if sum(np.size(one) for value in outputs.values() for one in value) <= \
                INLINE_ANSWER_VALUES:
            return JSONResponse(tf_serving.predict_response(outputs, columnar))
        return await run_in_threadpool(
            lambda: JSONResponse(tf_serving.predict_response(outputs, columnar)))

    async def _decode_in_time(self, read, body: bytes, ticket: Ticket):
        """`read(body)` on a decoding thread, unless the request waited its whole
        `max_wait_ms` for one (it is refused then, without the work)."""
        def read_in_time():
            return None if time.monotonic() > ticket.deadline else read(body)

        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self.decoding, read_in_time)
        if result is None:
            raise self.admission.expire(ticket)
        return result

    def _read_predict(self, body: bytes) -> tuple[str, np.ndarray, bool, int]:
        """A predict body -> (batcher kind, inputs, columnar answer, model rows per instance),
        on a worker thread."""
        parsed = self._parse_predict(body)
        if parsed.files is None:
            return "images", parsed.images, parsed.columnar, 1
        if self.task.reads_served_files:
            inputs, rows = self._task_inputs(parsed.files)
            return "images", inputs, parsed.columnar, rows
        if self.model.takes_files:
            return "encoded", np.array(parsed.files, dtype=object), parsed.columnar, 1
        return "images", self._decode(parsed.files), parsed.columnar, 1

    def _parse_predict(self, body: bytes) -> tf_serving.PredictRequest:
        try:
            parsed = tf_serving.parse_predict(json.loads(body), len(self._sample_shape))
        except json.JSONDecodeError as error:
            raise RequestError(400, f"the body is not valid JSON ({error})") from None
        except RecursionError:
            raise RequestError(400, "the body's JSON is nested too deeply") from None
        except ValueError as error:
            raise RequestError(400, str(error)) from None
        count = len(parsed.files if parsed.images is None else parsed.images)
        if count > self.options.max_instances:
            raise RequestError(413, f"a request may hold at most {self.options.max_instances} "
                                    f"instances (vit serve --max-instances), got {count}")
        if parsed.images is not None:
            self._check_input_shape(parsed.images.shape[1:])
        if not self.task.reads_served_files:
            for index, data in enumerate(parsed.files or []):
                check_encoded(data, f"instance {index}:")
        return parsed

    @property
    def _sample_shape(self) -> tuple:
        """One input's shape ((H, W, 3); a clip model's (frames, H, W, 3)), None for a free
        side."""
        if self.model.input_shape:
            return tuple(self.model.input_shape)
        return (*(self.model.image_size or (None, None)), 3)

    def _check_input_shape(self, shape) -> None:
        if len(shape) == 3:
            problem = self.model.size_problem(*shape[:2])
        else:
            problem = None if tuple(shape) == self._sample_shape else \
                f"expected {self.task.input_noun}s of shape {list(self._sample_shape)}"
        if problem:
            raise RequestError(400, f"{tf_serving.SERVING_DEFAULT!r}: {problem}, got instances "
                                    f"of shape {list(shape)}; send encoded files to "
                                    f"{tf_serving.SERVE_BYTES!r} to have them resized")

    def _task_inputs(self, files: list[bytes]) -> tuple[np.ndarray, int]:
        """The task's model inputs of encoded files it reads itself, and rows per file."""
        try:
            return self.task.served_inputs(self.model, files)
        except ValueError as error:
            raise RequestError(400, str(error)) from None

    def _decode(self, files: list[bytes]) -> np.ndarray:
        try:
            return images.decode_checked(files, self.model.image_size,
                                         preprocessing=self.model.resize_rule)
        except images.ImageError as error:
            raise RequestError(STATUS_OF_IMAGE_PROBLEM[error.reason], str(error)) from None

    async def _submit(self, kind: str, inputs: np.ndarray, ticket: Ticket) -> dict:
        try:
            return await self.batcher.submit(kind, inputs, ticket.deadline, ticket.started)
        except QueueFull as error:
            raise Busy(str(error)) from None
        except Expired:
            raise self.admission.expire(ticket) from None
        except ShuttingDown as error:
            raise RequestError(503, str(error)) from None
        except ValueError as error:  # the model refused these inputs (e.g. their size)
            raise RequestError(400, str(error)) from None
        except tf.errors.InvalidArgumentError as error:  # an exported graph's own input checks
            raise RequestError(400, f"the model refused the input: {_assertion(error)}") \
                from None

    async def explain(self, request: Request):
        """The page's call: an image file in, the top classes and the rollout heatmap out."""
        with self.admission.admit() as ticket:
            data = await read_body(request, self.options.max_request_bytes)
            kind, inputs, rows = await self._decode_in_time(self._read_explain, data, ticket)
            outputs = self.task.joined(await self._submit(kind, inputs, ticket), rows)
        return JSONResponse({**self._explanation(outputs),
                             **self.task.page_picture(inputs, rows)})

    def _read_explain(self, data: bytes) -> tuple[str, np.ndarray, int]:
        """The page's file -> (batcher kind, inputs, model rows of it), on a worker thread."""
        if self.task.reads_served_files:
            return "images", *self._task_inputs([data])
        check_encoded(data, "the image")
        if self.model.takes_files:
            return "encoded", np.array([data], dtype=object), 1
        explains = self.task.explains(self.model)
        return "explain" if explains else "images", self._decode([data]), 1

    def _explanation(self, outputs: dict) -> dict:
        return self.task.page_answer(self.name, self.model, outputs)

    def _serving_outputs(self) -> dict:
        """The REST answer's outputs, as the task gives them, for the metadata."""
        height, width = self.model.image_size or (-1, -1)
        return self.task.serving_outputs(height, width, self.model.num_classes)


def _assertion(error) -> str:
    """The failed check of a TensorFlow graph error, without the graph's call stack."""
    message = error.message
    found = re.search(r"assertion failed: (.*)", message)
    return (found.group(1) if found else message.strip().splitlines()[-1])[:500]


def check_encoded(data: bytes, what: str) -> None:
    """`vit_app.images.check` as a RequestError: 413 over the pixel limit, else 400."""
    try:
        images.check(data, what)
    except images.ImageError as error:
        raise RequestError(STATUS_OF_IMAGE_PROBLEM[error.reason], str(error)) from None


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes `limit` bytes.

    Args:
        request: the request (with or without Content-Length; chunked bodies are counted as
            they arrive).
        limit: the most bytes accepted.

    Returns:
        The body.

    Raises:
        RequestError: 413 over the limit, 400 for an empty body or a bad Content-Length.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise RequestError(400, f"Content-Length must be a number, got {declared!r}")
        if int(declared) > limit:
            raise RequestError(413, _too_large(int(declared), limit))
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, _too_large(size, limit))
        chunks.append(chunk)
    if not size:
        raise RequestError(400, "the request body is empty")
    return b"".join(chunks)


def _too_large(size: int, limit: int) -> str:
    return (f"the request body has {size} bytes (or more); the limit is {limit} bytes "
            "(vit serve --max-request-mb)")


async def _request_error(request: Request, error: RequestError):
    return JSONResponse({"error": error.message}, error.status, headers=error.headers)


async def _busy(request: Request, error: Busy):
    return JSONResponse({"error": busy_message(error)}, 503,
                        headers={"Retry-After": str(RETRY_AFTER_S)})


async def _http_error(request: Request, error: HTTPException):
    detail = error.detail if error.status_code != 404 else \
        f"no such page {request.url.path!r}; see GET / or the API under /v1/models/"
    return JSONResponse({"error": detail}, error.status_code, headers=error.headers)


async def _crash(request: Request, error: Exception):
    return JSONResponse({"error": f"the model failed on this request ({type(error).__name__}: "
                                  f"{error}); the server keeps running"}, 500)
