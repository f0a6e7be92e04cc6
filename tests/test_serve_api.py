"""`vit serve` over real HTTP on loopback: TF Serving's predict API for both signatures equals
the model, every bad request gets a JSON 4xx and leaves the server answering, a full queue
answers 503, concurrent requests share batches, and every served format agrees."""

import base64
import contextlib
import io
import os
import re
import signal
import subprocess
import threading
import time

import httpx
import numpy as np
import pytest
from helpers import FULL_SWEEPS, png_bomb, random_pixels, randomize_weights, script_module
from localhost import free_ports, served
from runs import start_vit, vit_env
from PIL import Image

from vit_app.inference import classifier
from vit_app.images import load_files
from vit_app.inference.server import ServeOptions, create_app
from vit_keras import VisionTransformer, ViTConfig, export, preprocess_input

CONFIG = ViTConfig(image_size=32, patch_size=8, hidden_size=32, mlp_dim=64, num_heads=4,
                   num_layers=2, num_classes=5)
LABELS = ["cat", "dog", "bird", "fish", "frog"]


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """A run folder as `vit train` leaves it: model.keras and labels.txt."""
    folder = tmp_path_factory.mktemp("run")
    model = randomize_weights(VisionTransformer(CONFIG), stddev=0.2)
    model.save(str(folder / "model.keras"))
    (folder / "labels.txt").write_text("".join(f"{name}\n" for name in LABELS))
    return folder


@pytest.fixture(scope="module")
def keras_model(run_folder):
    return classifier.load(str(run_folder / "model.keras"))


@pytest.fixture(scope="module")
def base_url(keras_model):
    app = create_app(keras_model, "tiny", ServeOptions(max_request_bytes=2**20),
                     allowed_hosts=["127.0.0.1", "localhost"])  # as `vit serve` on loopback
    with served(app) as url:
        yield url


@pytest.fixture
def client(base_url):
    with httpx.Client(base_url=base_url, timeout=60) as session:
        yield session


def _expected(model, pixels):
    logits = np.asarray(model.keras_model(preprocess_input(pixels)))
    return logits, classifier.scores_from_logits(logits)


def _png(pixels) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.asarray(pixels, np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def _jpeg(height, width, seed=0) -> bytes:
    buffer = io.BytesIO()
    colours = np.random.default_rng(seed).integers(0, 256, (height, width, 3), np.uint8)
    Image.fromarray(colours).save(buffer, "JPEG", quality=95)
    return buffer.getvalue()


def _b64(data: bytes) -> dict:
    return {"b64": base64.b64encode(data).decode()}


def _image_files(tmp_path):
    """A PNG at the model's size and a JPEG and a PNG the server must resize."""
    files = {"a.png": _png(random_pixels(CONFIG, batch=1, seed=1)[0]),
             "b.jpg": _jpeg(50, 70, seed=2),
             "c.png": _png(random_pixels((20, 44), batch=1, seed=3)[0])}
    paths = []
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        paths.append(str(tmp_path / name))
    return list(files.values()), paths


def test_float_instances_equal_the_model_in_both_formats(client, keras_model):
    pixels = random_pixels(CONFIG, batch=3, seed=5)
    logits, probabilities = _expected(keras_model, pixels)
    rows = client.post("/v1/models/tiny:predict", json={"instances": pixels.tolist()})
    assert rows.status_code == 200, rows.text
    predictions = rows.json()["predictions"]
    np.testing.assert_allclose([p["logits"] for p in predictions], logits, atol=1e-5)
    np.testing.assert_allclose([p["probabilities"] for p in predictions], probabilities,
                               atol=1e-6)
    assert np.abs(logits).max() > 0.1  # random weights: a wrong path could not agree
    columns = client.post("/v1/models/tiny/versions/1:predict", json={
        "signature_name": "serving_default", "inputs": {"images": pixels.tolist()}})
    np.testing.assert_allclose(columns.json()["outputs"]["logits"], logits, atol=1e-5)
    named = client.post("/v1/models/tiny:predict",
                        json={"instances": [{"images": image} for image in pixels.tolist()]})
    np.testing.assert_allclose([p["logits"] for p in named.json()["predictions"]], logits,
                               atol=1e-5)


def test_b64_files_equal_the_model_on_the_decoded_images(client, keras_model, tmp_path):
    files, paths = _image_files(tmp_path)
    logits, probabilities = _expected(keras_model, load_files(paths, CONFIG.image_size))
    response = client.post("/v1/models/tiny:predict", json={
        "signature_name": "serve_bytes", "instances": [_b64(data) for data in files]})
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    np.testing.assert_allclose([p["logits"] for p in predictions], logits, atol=1e-5)
    np.testing.assert_allclose([p["probabilities"] for p in predictions], probabilities,
                               atol=1e-6)
    named = client.post("/v1/models/tiny:predict", json={
        "signature_name": "serve_bytes",
        "inputs": {"image_bytes": [_b64(data) for data in files]}})
    np.testing.assert_allclose(named.json()["outputs"]["logits"], logits, atol=1e-5)


def test_status_metadata_health_and_page(client):
    assert client.get("/healthz").json() == {"status": "ok", "model": "tiny", "in_server": 0,
                                             "limit": 64, "refused": 0, "expired": 0}
    status = client.get("/v1/models/tiny").json()["model_version_status"][0]
    assert (status["version"], status["state"]) == ("1", "AVAILABLE")
    metadata = client.get("/v1/models/tiny/metadata").json()
    assert metadata["model_spec"]["name"] == "tiny"
    signatures = metadata["metadata"]["signature_def"]["signature_def"]
    images = signatures["serving_default"]["inputs"]["images"]
    assert [d["size"] for d in images["tensor_shape"]["dim"]] == ["-1", "32", "32", "3"]
    assert signatures["serve_bytes"]["inputs"]["image_bytes"]["dtype"] == "DT_STRING"
    assert set(signatures["serve_bytes"]["outputs"]) == {"probabilities", "logits"}
    page = client.get("/")
    assert page.status_code == 200 and "default-src 'self'" in \
        page.headers["content-security-policy"]
    assert "/static/page.js" in page.text and "https://" not in page.text
    assert client.get("/static/page.js").status_code == 200


def test_explain_gives_the_top_classes_and_the_rollout(client, keras_model, tmp_path):
    files, paths = _image_files(tmp_path)
    response = client.post("/api/explain", content=files[1],
                           headers={"content-type": "image/jpeg"})
    assert response.status_code == 200, response.text
    result = response.json()
    _, probabilities = _expected(keras_model, load_files(paths[1:2], CONFIG.image_size))
    order = np.argsort(-probabilities[0], kind="stable")
    assert [c["label"] for c in result["top"]] == [LABELS[i] for i in order]
    np.testing.assert_allclose([c["probability"] for c in result["top"]],
                               probabilities[0][order], atol=1e-6)
    heatmap = result["heatmap"]
    assert (heatmap["rows"], heatmap["cols"]) == CONFIG.grid_size
    assert max(heatmap["values"]) == 1.0 and min(heatmap["values"]) >= 0.0
    assert len(set(heatmap["values"])) > 1


def _bad_requests():
    """(what, method, path, body or json, expected status, part of the error)."""
    good = random_pixels(CONFIG, batch=1).tolist()
    return [
        ("bad json", "POST", "/v1/models/tiny:predict", b"{not json", 400, "not valid JSON"),
        ("no instances", "POST", "/v1/models/tiny:predict", {"signature_name": "x"}, 400,
         "exactly one of"),
        ("wrong shape", "POST", "/v1/models/tiny:predict",
         {"instances": random_pixels((16, 16), batch=1).tolist()}, 400,
         r"expected images of 32x32 pixels, got instances of shape \[16, 16, 3\]"),
        ("not an image", "POST", "/v1/models/tiny:predict", {"instances": [[1, 2, 3]]}, 400,
         r"shape \[H, W, 3\]"),
        ("ragged", "POST", "/v1/models/tiny:predict", {"instances": [[[[1, 2, 3]]], [[1]]]}, 400,
         "ragged"),
        ("b64 to floats", "POST", "/v1/models/tiny:predict", {"instances": [_b64(b"x")]}, 400,
         "serve_bytes"),
        ("corrupt image", "POST", "/v1/models/tiny:predict",
         {"signature_name": "serve_bytes", "instances": [_b64(_jpeg(40, 40)[:300])]}, 400,
         "instance 0: is a corrupt image"),
        ("not base64", "POST", "/v1/models/tiny:predict",
         {"signature_name": "serve_bytes", "instances": [{"b64": "@@@"}]}, 400, "base64"),
        ("decompression bomb", "POST", "/v1/models/tiny:predict",
         {"signature_name": "serve_bytes", "instances": [_b64(png_bomb(20000, 20000))]}, 413,
         "too large"),
        ("body too large", "POST", "/v1/models/tiny:predict", b"x" * (2**20 + 1), 413,
         "limit is 1048576 bytes"),
        ("unknown signature", "POST", "/v1/models/tiny:predict",
         {"signature_name": "serve_tokens", "instances": good}, 400, "unknown signature_name"),
        ("wrong model", "POST", "/v1/models/resnet:predict", {"instances": good}, 404,
         "'resnet' is not served here"),
        ("wrong version", "GET", "/v1/models/tiny/versions/7", None, 404, "no version '7'"),
        ("classify", "POST", "/v1/models/tiny:classify", {"instances": good}, 400, ":predict"),
        ("GET predict", "GET", "/v1/models/tiny:predict", None, 405, "POST"),
        ("empty explain", "POST", "/api/explain", b"", 400, "empty"),
        ("explain text", "POST", "/api/explain", b"hello", 400, "not a JPEG"),
        ("no page", "GET", "/nowhere", None, 404, "no such page"),
        ("no asset", "GET", "/static/index.html", None, 404, "no such file"),
        ("signature not text", "POST", "/v1/models/tiny:predict",
         {"signature_name": ["serve_bytes"], "instances": good}, 400, "unknown signature_name"),
        ("huge number", "POST", "/v1/models/tiny:predict", {"instances": [[[[10**400] * 3]]]},
         400, "float RGB pixels"),
        ("deep JSON", "POST", "/v1/models/tiny:predict", b"[" * 100_000, 400, "nested too deeply"),
        ("too many instances", "POST", "/v1/models/tiny:predict",
         {"signature_name": "serve_bytes", "instances": [_b64(b"x")] * 65}, 413,
         "at most 64 instances"),
    ]


@pytest.mark.parametrize("what, method, path, body, status, error", _bad_requests(),
                         ids=[case[0] for case in _bad_requests()])
def test_bad_requests_get_a_json_4xx_and_the_server_keeps_answering(
        client, what, method, path, body, status, error):
    content = body if isinstance(body, bytes) else None
    response = client.request(method, path, content=content,
                              json=None if content is not None else body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert re.search(error, response.json()["error"]), response.json()
    good = client.post("/v1/models/tiny:predict",
                       json={"instances": random_pixels(CONFIG, batch=1).tolist()})
    assert good.status_code == 200


def test_a_foreign_host_header_is_refused(client):
    """A page on another site that re-points its domain at 127.0.0.1 sends its own Host."""
    response = client.get("/v1/models/tiny", headers={"host": "attacker.example"})
    assert response.status_code == 400
    assert client.get("/v1/models/tiny", headers={"host": "localhost:8500"}).status_code == 200


class _HeldModel:
    """Stands in for a classifier whose calls wait until the test releases them."""

    def __init__(self):
        self.release = threading.Event()

    def __call__(self, images):
        self.release.wait(timeout=60)
        return np.zeros((len(images), 2), np.float32)


def test_a_full_server_answers_503_at_once_and_then_recovers():
    """One request in the model, one waiting (queue size 2): the other four are refused at
    once, before the model answers anything."""
    held = _HeldModel()
    model = classifier.Classifier(path="held", format="keras", image_size=(4, 4), num_classes=2,
                                  labels=None, run_outputs=classifier.outputs_from_logits(held))
    options = ServeOptions(max_batch=1, batch_timeout_ms=0, queue_size=2, max_wait_ms=60_000)
    body = {"instances": np.zeros((1, 4, 4, 3)).tolist()}
    held.release.set()  # the warm-up runs through
    with served(create_app(model, "held", options)) as url:
        held.release.clear()
        responses = []

        def call():
            with httpx.Client(base_url=url, timeout=60) as session:
                responses.append(session.post("/v1/models/held:predict", json=body))

        threads = [threading.Thread(target=call) for _ in range(6)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while len(responses) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        held.release.set()
        for thread in threads:
            thread.join()
        codes = sorted(response.status_code for response in responses)
        assert codes == [200, 200, 503, 503, 503, 503], codes
        busy = [r for r in responses if r.status_code == 503][0]
        assert busy.headers["retry-after"] == "1" and "busy" in busy.json()["error"]
        assert "--queue-size" in busy.json()["error"]
        assert httpx.post(f"{url}/v1/models/held:predict", json=body).status_code == 200
        load = httpx.get(f"{url}/healthz").json()
        assert (load["in_server"], load["refused"], load["expired"]) == (0, 4, 0), load


def test_a_request_that_cannot_reach_the_model_in_time_answers_503():
    """--max-wait-ms: a request stuck behind a slow model call is refused when its time is up,
    not answered late; the one in the model is answered."""
    held = _HeldModel()
    model = classifier.Classifier(path="held", format="keras", image_size=(4, 4), num_classes=2,
                                  labels=None, run_outputs=classifier.outputs_from_logits(held))
    options = ServeOptions(max_batch=1, batch_timeout_ms=0, queue_size=8, max_wait_ms=200)
    body = {"instances": np.zeros((1, 4, 4, 3)).tolist()}
    held.release.set()
    with served(create_app(model, "held", options)) as url:
        held.release.clear()
        first = {}
        thread = threading.Thread(target=lambda: first.update(
            response=httpx.post(f"{url}/v1/models/held:predict", json=body, timeout=60)))
        thread.start()
        while not httpx.get(f"{url}/healthz").json()["in_server"]:
            time.sleep(0.01)
        start = time.monotonic()
        late = httpx.post(f"{url}/v1/models/held:predict", json=body, timeout=60)
        waited = time.monotonic() - start
        held.release.set()
        thread.join()
        assert late.status_code == 503 and late.headers["retry-after"] == "1"
        assert "--max-wait-ms 200" in late.json()["error"], late.json()
        assert 0.2 <= waited < 5, waited  # refused when the time was up, not after the model
        assert first["response"].status_code == 200
        assert httpx.get(f"{url}/healthz").json()["expired"] == 1


def test_concurrent_requests_share_batches(keras_model):
    pixels = random_pixels(CONFIG, batch=12, seed=9)
    logits, _ = _expected(keras_model, pixels)
    app = create_app(keras_model, "tiny", ServeOptions(max_batch=12, batch_timeout_ms=200))
    results = {}
    with served(app) as url:
        def call(i):
            with httpx.Client(base_url=url, timeout=60) as session:
                response = session.post("/v1/models/tiny:predict",
                                        json={"instances": pixels[i:i + 1].tolist()})
                results[i] = response

        threads = [threading.Thread(target=call, args=(i,)) for i in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert [results[i].status_code for i in range(12)] == [200] * 12, \
        [results[i].text for i in range(12) if results[i].status_code != 200]
    np.testing.assert_allclose([results[i].json()["predictions"][0]["logits"]
                                for i in range(12)], logits, atol=1e-5)
    batch_sizes = list(app.state.batcher.batch_sizes)
    assert sum(batch_sizes) == 12 and max(batch_sizes) > 1, batch_sizes


@pytest.mark.parametrize("form", ["saved_model", "tflite", "onnx"])
@pytest.mark.slow
def test_exported_formats_serve_the_keras_models_predictions(form, run_folder, keras_model,
                                                             tmp_path):
    writers = {"saved_model": (export.saved_model, "saved_model"),
               "tflite": (export.tflite, "model.tflite"), "onnx": (export.onnx, "model.onnx")}
    write, name = writers[form]
    write(keras_model.keras_model, str(run_folder / name))
    model = classifier.load(str(run_folder / name))
    assert (model.format, model.labels, model.image_size) == (form, LABELS, (32, 32))
    files, paths = _image_files(tmp_path)
    pixels = random_pixels(CONFIG, batch=2, seed=11)
    with served(create_app(model, "tiny")) as url, httpx.Client(base_url=url) as session:
        floats = session.post("/v1/models/tiny:predict", json={"instances": pixels.tolist()})
        encoded = session.post("/v1/models/tiny:predict", json={
            "signature_name": "serve_bytes", "instances": [_b64(data) for data in files]})
        explained = session.post("/api/explain", content=files[0]).json()
    np.testing.assert_allclose([p["logits"] for p in floats.json()["predictions"]],
                               _expected(keras_model, pixels)[0], atol=1e-4)
    expected = _expected(keras_model, load_files(paths, CONFIG.image_size))[0]
    np.testing.assert_allclose([p["logits"] for p in encoded.json()["predictions"]], expected,
                               atol=1e-4)
    assert explained["heatmap"] is None and form in explained["caption"]
    assert explained["top"][0]["label"] == LABELS[int(np.argmax(expected[0]))]


def test_a_model_taking_any_size_serves_any_size(tmp_path):
    config = CONFIG.replace(dynamic_image_size=True)
    model = randomize_weights(VisionTransformer(config), stddev=0.2)
    model.save(str(tmp_path / "model.keras"))
    served_model = classifier.load(str(tmp_path / "model.keras"))
    assert served_model.takes_any_size and served_model.image_size == (32, 32)
    pixels = random_pixels((24, 40), batch=2, seed=4)
    with served(create_app(served_model, "any")) as url:
        response = httpx.post(f"{url}/v1/models/any:predict", json={"instances":
                                                                      pixels.tolist()})
        odd = httpx.post(f"{url}/v1/models/any:predict",
                         json={"instances": random_pixels((20, 20), batch=1).tolist()})
    np.testing.assert_allclose([p["logits"] for p in response.json()["predictions"]],
                               np.asarray(model(preprocess_input(pixels))), atol=1e-5)
    assert odd.status_code == 400 and "multiple" in odd.json()["error"], odd.text


def _start_serve(run_folder, cwd, *options):
    """`vit serve` of the run folder's model.keras in a subprocess; (process, port)."""
    port = free_ports(1)[0]
    process = start_vit(["serve", "--model", run_folder / "model.keras", "--port", port,
                         *options], cwd, vit_env(PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    return process, port


@pytest.mark.slow
def test_the_vit_serve_command_serves_until_interrupted(run_folder, tmp_path):
    process, port = _start_serve(run_folder, tmp_path)
    try:
        health = _wait_for(f"http://127.0.0.1:{port}/healthz", process)
        assert health["status"] == "ok" and health["model"] == run_folder.name, health
        response = httpx.post(f"http://127.0.0.1:{port}/v1/models/{run_folder.name}:predict",
                              json={"instances": random_pixels(CONFIG, batch=1).tolist()})
        assert response.status_code == 200
    finally:
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert f"Serving '{run_folder.name}' (keras, 32x32, 5 classes) on " \
           f"http://127.0.0.1:{port}/" in stdout and "vit serve: stopped" in stdout
    assert "Traceback" not in stderr


@pytest.mark.slow  # a `vit serve` process holding requests 4 s (about 10 s), with the drain
def test_sigterm_answers_the_requests_in_flight_then_exits_0(run_folder, tmp_path):
    """Three requests wait in the batcher (a 4 s batching window) when SIGTERM comes: the
    server takes no new connection, answers all three, and exits with status 0."""
    process, port = _start_serve(run_folder, tmp_path, "--batch-timeout-ms", "4000",
                                 "--max-wait-ms", "60000")
    url = f"http://127.0.0.1:{port}"
    _wait_for(url + "/healthz", process)
    body = {"instances": random_pixels(CONFIG, batch=1).tolist()}
    answers = []

    def ask():
        answers.append(httpx.post(f"{url}/v1/models/{run_folder.name}:predict", json=body,
                                  timeout=60))

    clients = [threading.Thread(target=ask) for _ in range(3)]
    for client in clients:
        client.start()
    time.sleep(1.5)  # all three are in flight, inside the batching window
    process.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    with pytest.raises(httpx.TransportError):
        httpx.get(url + "/healthz", timeout=5)
    for client in clients:
        client.join(timeout=60)
    stdout, stderr = process.communicate(timeout=60)
    assert [answer.status_code for answer in answers] == [200] * 3
    assert all(len(answer.json()["predictions"]) == 1 for answer in answers)
    assert process.returncode == 0, stderr
    assert "SIGTERM: no new connections; answering the requests in flight" in stderr
    assert "vit serve: stopped" in stdout and "Traceback" not in stderr


@pytest.mark.slow
def test_the_drain_is_bounded(run_folder, tmp_path):
    """A request that would wait 60 s in the batcher does not hold the exit past
    --drain-seconds."""
    process, port = _start_serve(run_folder, tmp_path, "--batch-timeout-ms", "60000",
                                 "--max-wait-ms", "120000", "--drain-seconds", "1")
    url = f"http://127.0.0.1:{port}"
    _wait_for(url + "/healthz", process)
    body = {"instances": random_pixels(CONFIG, batch=1).tolist()}
    waiting = threading.Thread(target=lambda: httpx.post(
        f"{url}/v1/models/{run_folder.name}:predict", json=body, timeout=60), daemon=True)
    waiting.start()
    time.sleep(1.0)
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert time.monotonic() - sent < 10
    assert "(up to 1 s)" in stderr and "vit serve: stopped" in stdout
    assert "Cancel 1 running task(s), timeout graceful shutdown exceeded" in stderr


def _ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback (::1)")
@pytest.mark.slow  # a `vit serve` process (about 6 s); the Host check itself: the test above
def test_on_ipv6_loopback_only_loopback_host_headers_are_answered(run_folder, tmp_path):
    process, port = _start_serve(run_folder, tmp_path, "--host", "::1")
    url = f"http://[::1]:{port}"
    try:
        assert _wait_for(url + "/healthz", process)["status"] == "ok"
        for host in (f"[::1]:{port}", f"localhost:{port}", "[::1]"):
            assert httpx.get(url + "/healthz", headers={"host": host}).status_code == 200, host
        for host in ("attacker.example", f"attacker.example:{port}", "[::2]", "127.0.0.2"):
            response = httpx.get(url + "/healthz", headers={"host": host})
            assert response.status_code == 400, host
    finally:
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert f"on http://[::1]:{port}/" in stdout and "reachable from other machines" not in stdout


def _wait_for(url, process, seconds=120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"vit serve exited: {process.communicate()}")
        try:
            return httpx.get(url, timeout=2).json()
        except httpx.TransportError:
            time.sleep(0.25)
    raise AssertionError(f"{url} did not answer within {seconds} s")


def test_vit_serve_refuses_bad_options_and_files(run_folder, capsys):
    from vit import cli

    assert cli.main(["serve", "--model", str(run_folder / "missing.keras")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["serve", "--model", str(run_folder / "labels.txt")]) == 2
    assert "expected a .keras file, a keras-hub preset folder, a SavedModel directory, a .tflite " \
        "or an .onnx file" in capsys.readouterr().err
    assert cli.main(["serve", "--model", str(run_folder / "model.keras"), "--port", "0"]) == 2
    assert "--port must be in 1..65535" in capsys.readouterr().err
    assert cli.main(["serve", "--model", str(run_folder / "model.keras"), "--name", "a/b"]) == 2
    assert "--name may hold" in capsys.readouterr().err
    assert cli.main(["serve", "--model", str(run_folder / "model.keras"),
                     "--max-wait-ms", "0"]) == 2
    assert "--max-wait-ms must be > 0" in capsys.readouterr().err
    assert cli.main(["serve", "--model", str(run_folder / "model.keras"),
                     "--batch-timeout-ms", "900"]) == 2
    assert "raise --max-wait-ms or lower --batch-timeout-ms" in capsys.readouterr().err


def test_eight_keep_alive_clients_are_all_answered_in_shared_batches(keras_model):
    """The lightest step of benchmarks/serve_load.py, in this process: every request answered
    200 over its keep-alive connection, none refused or dropped, requests sharing model calls.

    The outcome must not depend on how busy the machine is (another xdist worker training
    beside it delayed model calls past the default --max-wait-ms, and 3 of 8 clients got 503):
    the wait limit, tested on its own above, is far off here, and the batching window is long
    enough for the 8 clients, which all send at once, to meet in one model call.
    """
    import asyncio

    load = script_module("benchmarks", "serve_load")
    requests = [load.request_bytes("tiny", keras_model.image_size, signature, seed)
                for seed, signature in enumerate(["serve_bytes", "serving_default"] * 4)]
    options = ServeOptions(batch_timeout_ms=1000, max_wait_ms=600_000)
    app = create_app(keras_model, "tiny", options)
    with served(app) as url:
        tally = asyncio.run(load.step(int(url.rsplit(":", 1)[1]), requests, clients=8,
                                      duration=2.0, honor_retry_after=True))
        sizes = list(app.state.batcher.batch_sizes)
    assert len(tally.answered_s) >= 8, tally  # each client's first request, at the least
    assert not (tally.refused_s or tally.other or tally.dropped or tally.connect_failed), tally
    assert max(sizes) > 4  # a float request holds 4 images: more means requests shared a call


@pytest.mark.slow
def test_under_overload_the_server_refuses_at_once_drops_nothing_and_stays_fast(run_folder):
    """The promise of docs/serving.md at the scale it is made: 1024 keep-alive clients against
    `vit serve` in its own process, after 8; no connection dropped, 503s at 1024, p99 of
    answered requests within a second, the server healthy after each step. `VIT_FULL_SWEEPS=1`
    runs the benchmark's whole sweep (8, 256 and 1024 clients for 8 s each)."""
    load = script_module("benchmarks", "serve_load")
    cores = sorted(os.sched_getaffinity(0))
    pinning = ["--server-cores", str(cores[0]), "--client-cores", str(cores[-1])]
    clients, duration = ([8, 256, 1024], "8") if FULL_SWEEPS else ([8, 1024], "4")
    results = []
    code = load.main(["--model", str(run_folder / "model.keras"),
                      "--clients", ",".join(map(str, clients)), "--duration", duration,
                      "--pause", "1", "--check", *pinning], results.append)
    assert code == 0, results
    assert [row["clients"] for row in results[0]] == clients
    assert results[0][-1]["refused_at_door"] > 0


def test_a_failing_job_fails_alone_and_the_batcher_keeps_serving():
    import asyncio

    from vit_app.inference.server.batching import Batcher

    calls = []

    def run(kind, inputs):
        calls.append(len(inputs))
        if (inputs < 0).any():
            raise ValueError("negative input")
        return {"double": inputs * 2}

    async def scenario():
        batcher = Batcher(run, max_batch=8, batch_timeout_ms=100, queue_size=8)
        await batcher.start()
        jobs = [batcher.submit("x", np.full((1, 2), value, np.float32))
                for value in (1, 2, -1, 3)]
        results = await asyncio.gather(*jobs, return_exceptions=True)
        after = await batcher.submit("x", np.ones((2, 2), np.float32))
        await batcher.stop()
        return results, after

    results, after = asyncio.run(scenario())
    assert [r["double"][0, 0] for r in results if isinstance(r, dict)] == [2, 4, 6]
    assert isinstance(results[2], ValueError) and "negative" in str(results[2])
    assert calls[0] == 4 and calls[1:5] == [1, 1, 1, 1]  # one batch, then job by job
    np.testing.assert_array_equal(after["double"], np.full((2, 2), 2))


def test_admission_refuses_a_request_that_would_wait_past_half_its_budget():
    """The door's rule: requests waiting times the pace they reach the model at, or the age of
    the oldest, over half of --max-wait-ms refuses the next one; the count limit too."""
    from vit_app.inference.server.admission import Admission, Busy

    admission = Admission(limit=100, max_wait_ms=200)
    with contextlib.ExitStack() as held:
        tickets = [held.enter_context(admission.admit()) for _ in range(12)]
        for ticket in tickets[:2]:  # two reach the model 20 ms apart: a pace of 20 ms
            ticket.started()
            time.sleep(0.02)
        assert admission.refusal() is not None  # 10 waiting x 20 ms > 100 ms
        with pytest.raises(Busy, match="would wait about"):
            held.enter_context(admission.admit())
        for ticket in tickets[2:9]:
            ticket.started()
        assert admission.refusal() is None  # 3 waiting x ~3 ms
    assert admission.figures() == {"in_server": 0, "limit": 100, "refused": 1, "expired": 0}
    small = Admission(limit=1, max_wait_ms=200)
    with small.admit():
        with pytest.raises(Busy, match="--queue-size"):
            with small.admit():
                pass


def test_a_batching_window_longer_than_the_wait_budget_is_refused():
    with pytest.raises(ValueError, match="--batch-timeout-ms 600.*--max-wait-ms 500"):
        ServeOptions(batch_timeout_ms=600)
