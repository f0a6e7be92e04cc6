"""A clip model served, exported and inspected: `vit serve`'s REST answer for a video or volume
file is `vit predict`'s (its windows' scores averaged), float windows equal the model, bad
files get a 400 naming them, the page gets the frames the model saw; the SavedModel takes
windows and each clip's frames as encoded files; `vit export` reads a model's own number of
frames; `vit inspect` draws where and when the model looks, its rollout the image model's
where a clip is one image."""

import base64
import io
import json

import browser
import httpx
import numpy as np
import pytest
from clip_files import moving_square, write_video
from helpers import randomize_weights
from localhost import served
from PIL import Image

from vit import cli
from vit_app.inference import classifier
from vit_app.inference.server import ServeOptions, create_app
from vit_app.tasks.clip import inference as clip_inference
from vit_app.tasks.clip.data import readers
from vit_keras import ViTConfig, VisionTransformer, export
from vit_keras.analysis import attention_rollout
from vit_keras.tasks.clip.attention import space_time_rollout
from vit_keras.tasks.clip.inflate import inflate

FRAMES, SIZE = 4, 16
LABELS = ["left", "right", "still"]


def _video_bytes(tmp_path, clip) -> bytes:
    path = str(tmp_path / "clip.avi")
    write_video(path, clip)
    with open(path, "rb") as file:
        return file.read()


def _npy_bytes(volume) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, volume)
    return buffer.getvalue()


def _b64(data: bytes) -> dict:
    return {"b64": base64.b64encode(data).decode("ascii")}


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """A clip run's folder: model.keras (4 frames of 16 px, random weights), labels.txt and
    the config.json whose clip section gives the stride and the views."""
    folder = tmp_path_factory.mktemp("clip_run")
    config = ViTConfig(image_size=SIZE, patch_size=8, hidden_size=16, mlp_dim=32, num_heads=2,
                       num_layers=1, num_classes=len(LABELS))
    model = inflate(randomize_weights(VisionTransformer(config), stddev=0.3), frames=FRAMES,
                    layout="joint")
    randomize_weights(model, seed=1, stddev=0.3)
    model.save(str(folder / "model.keras"))
    (folder / "labels.txt").write_text("".join(f"{name}\n" for name in LABELS))
    (folder / "config.json").write_text(json.dumps(
        {"preset": {"clip": {"stride": 2, "views": 3, "short": "stretch"}}}))
    return folder


@pytest.fixture(scope="module")
def model(run_folder):
    return classifier.load(str(run_folder / "model.keras"))


@pytest.fixture(scope="module")
def client(model):
    # A clip's request waits while its video is decoded and windowed: on a loaded machine
    # (the slow tier's browser beside other workers) longer than the default 500 ms.
    app = create_app(model, "clips", ServeOptions(max_request_bytes=2**20, max_wait_ms=10_000),
                     allowed_hosts=["127.0.0.1", "localhost"])
    with served(app) as url, httpx.Client(base_url=url, timeout=60) as session:
        yield session


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """An MJPEG video of 12 frames and a 16-bit volume of 9 slices, of other sizes than the
    model's, as bytes."""
    folder = tmp_path_factory.mktemp("clip_files")
    video = _video_bytes(folder, moving_square(12, 40, 48, 1))
    volume = _npy_bytes(moving_square(9, 20, 24, -1)[..., 0].astype(np.int16) * 100)
    return [video, volume]


def test_served_files_answer_as_vit_predict_does(client, model, files):
    answer = client.post("/v1/models/clips:predict",
                         json={"signature_name": "serve_bytes",
                               "instances": [_b64(data) for data in files]})
    assert answer.status_code == 200, answer.text
    served_scores = np.array([row["probabilities"] for row in answer.json()["predictions"]])
    windows, views = clip_inference.model_windows(model)
    assert (windows.frames, windows.stride, views) == (FRAMES, 2, 3)
    clips = [readers.read_clip_bytes(data, "file") for data in files]
    expected = clip_inference.clip_scores(model, clips, windows, views, batch_size=2)
    np.testing.assert_allclose(served_scores, expected, atol=1e-5)
    assert len(answer.json()["predictions"][0]["logits"]) == len(LABELS)


def test_float_windows_equal_the_model_and_other_shapes_are_refused(client, model):
    windows = np.random.default_rng(0).uniform(0, 255, (2, FRAMES, SIZE, SIZE, 3))
    answer = client.post("/v1/models/clips:predict", json={"instances": windows.tolist()})
    assert answer.status_code == 200, answer.text
    np.testing.assert_allclose([row["probabilities"] for row in answer.json()["predictions"]],
                               model.predict(windows)["probabilities"], atol=1e-5)
    wrong = client.post("/v1/models/clips:predict",
                        json={"instances": windows[:, :2].tolist()})
    assert wrong.status_code == 400
    assert f"expected clips of shape [{FRAMES}, {SIZE}, {SIZE}, 3]" in wrong.json()["error"]
    image = client.post("/v1/models/clips:predict", json={"instances": windows[:, 0].tolist()})
    assert image.status_code == 400 and "[frames, H, W, 3]" in image.json()["error"]
    metadata = client.get("/v1/models/clips/metadata").json()["metadata"]["signature_def"]
    dims = metadata["signature_def"]["serving_default"]["inputs"]["images"]["tensor_shape"]
    assert [int(dim["size"]) for dim in dims["dim"]] == [-1, FRAMES, SIZE, SIZE, 3]


def test_files_that_are_no_clips_get_a_400_naming_them(client, files):
    png = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(png, "PNG")
    for data, expected in ((png.getvalue(), "instance 1: not a video"),
                           (files[0][:300], "instance 1: no frame could be decoded")):
        answer = client.post("/v1/models/clips:predict",
                             json={"signature_name": "serve_bytes",
                                   "instances": [_b64(files[1]), _b64(data)]})
        assert answer.status_code == 400 and expected in answer.json()["error"], answer.text
    assert client.post("/v1/models/clips:predict", json={
        "signature_name": "serve_bytes", "instances": [_b64(files[1])]}).status_code == 200


def test_the_page_gets_the_classes_and_the_frames_the_model_saw(client, model, files):
    features = client.get("/api/model").json()
    assert features["input_noun"] == "clip" and "video/*" in features["accept"]
    answer = client.post("/api/explain", content=files[0])
    assert answer.status_code == 200, answer.text
    result = answer.json()
    windows, views = clip_inference.model_windows(model)
    expected = clip_inference.clip_scores(
        model, [readers.read_clip_bytes(files[0], "file")], windows, views, 1)[0]
    assert result["top"][0]["label"] == LABELS[int(expected.argmax())]
    assert result["top"][0]["probability"] == pytest.approx(float(expected.max()), abs=1e-5)
    header, encoded = result["picture"].split(",", 1)
    assert header == "data:image/png;base64"
    picture = np.asarray(Image.open(io.BytesIO(base64.b64decode(encoded))))
    assert picture.shape == (SIZE, FRAMES * SIZE, 3)  # the middle window's frames in a row
    assert f"{FRAMES} frames" in result["caption"]


PHOTO_PIXELS = """
const canvas = document.getElementById("photo");
const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
let lit = 0;
for (let i = 0; i < data.length; i += 4) { if (data[i] > 100) { lit++; } }
return [canvas.width, canvas.height, lit];
"""


@pytest.mark.slow  # a browser; the page's answer is held in the default tier
def test_the_page_takes_a_video_and_draws_its_sampled_frames(client, model, files, tmp_path):
    browser.skip_without_browser()
    from selenium.webdriver.common.by import By

    video = tmp_path / "clip.avi"
    video.write_bytes(files[0])
    windows, views = clip_inference.model_windows(model)
    expected = clip_inference.clip_scores(
        model, [readers.read_clip_bytes(files[0], "file")], windows, views, 1)[0]
    driver = browser.start_chromium()
    try:
        state = browser.classify_in_page(driver, str(client.base_url), video)
        status = driver.find_element(By.ID, "status").text
        top1 = driver.find_element(By.TAG_NAME, "body").get_attribute("data-top1")
        accept = driver.find_element(By.ID, "file").get_attribute("accept")
        drop = driver.find_element(By.ID, "drop").text
        model_line = driver.find_element(By.ID, "model-line").text
        fader = driver.find_element(By.CSS_SELECTOR, ".opacity").is_displayed()
        width, height, lit = driver.execute_script(PHOTO_PIXELS)
        console = driver.get_log("browser")
    finally:
        driver.quit()
    assert state == "done", status
    assert top1 == LABELS[int(expected.argmax())]
    assert "video/*" in accept and "Drop a clip here" in drop
    assert f"{FRAMES} frames of {SIZE}×{SIZE} px" in model_line and not fader
    assert (width, height) == (448, 448 // FRAMES)  # the frames side by side
    assert lit > 0  # the moving square, drawn
    assert not [entry for entry in console if entry["level"] == "SEVERE"], console


def test_the_saved_model_takes_windows_and_each_clips_frames_as_files(run_folder, model,
                                                                       tmp_path):
    import tensorflow as tf

    path = export.saved_model(model.keras_model, str(tmp_path / "saved_model"))
    clips = np.stack([moving_square(FRAMES, SIZE, SIZE, direction) for direction in (1, -1)])
    loaded = tf.saved_model.load(path)
    from_pixels = loaded.signatures["serving_default"](images=tf.constant(clips, tf.float32))
    np.testing.assert_allclose(from_pixels["probabilities"].numpy(),
                               model.predict(clips.astype(np.float32))["probabilities"],
                               atol=1e-5)
    frames = [[_png_bytes(frame) for frame in clip] for clip in clips]
    from_files = loaded.signatures["serve_bytes"](image_bytes=tf.constant(frames))
    np.testing.assert_allclose(from_files["logits"].numpy(), from_pixels["logits"].numpy(),
                               atol=1e-4)
    (tmp_path / "saved_model" / "labels.txt").write_text("\n".join(LABELS))
    served_file = classifier.load(path)
    assert served_file.input_shape == (FRAMES, SIZE, SIZE, 3)


def _png_bytes(frame) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(frame).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.mark.slow  # 4 conversions and their checks
def test_vit_export_reads_the_models_own_frames(run_folder, tmp_path):
    assert cli.main(["export", "--model", str(run_folder / "model.keras"),
                     "--data", "moving-sprites", "--formats", "saved_model,tflite,onnx_int8",
                     "--calibration-images", "16", "--eval-images", "32",
                     "--output", str(tmp_path)]) in (0, 3)
    report = json.loads((tmp_path / "export.json").read_text())
    for name in ("saved_model", "tflite"):
        assert report["formats"][name]["passed"], report["formats"][name]
    assert report["formats"]["onnx_int8"]["top1_agreement"] is not None


def test_vit_inspect_draws_where_and_when_a_clip_model_looks(run_folder, model, files,
                                                            tmp_path):
    (tmp_path / "clip.avi").write_bytes(files[0])
    (tmp_path / "scan.npy").write_bytes(files[1])
    output = tmp_path / "inspect"
    assert cli.main(["inspect", "--model", str(run_folder / "model.keras"),
                     str(tmp_path / "clip.avi"), str(tmp_path / "scan.npy"),
                     "--output", str(output)]) == 0
    summary = json.loads((output / "inspect.json").read_text())
    assert summary["clips"] == ["clip.avi", "scan.npy"] and summary["layout"] == "joint"
    shares = np.array(summary["rollout"]["frame_shares"])
    assert shares.shape == (2, FRAMES // 2) and np.allclose(shares.sum(1), 1.0, atol=1e-3)
    maps = np.array(summary["rollout"]["maps"])
    assert maps.shape == (2, FRAMES // 2, SIZE // 8, SIZE // 8)
    windows, _ = clip_inference.model_windows(model)
    clips = [readers.read_clip_bytes(data, "file") for data in files]
    middle = clip_inference.clip_scores(model, clips, windows, 1, 2)
    assert summary["predicted_class"] == middle.argmax(-1).tolist()
    for index in range(2):
        assert Image.open(output / f"rollout_{index}.png").size[0] > 200


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_a_one_frame_clips_rollout_is_its_image_models(classifier):
    """A clip of one token frame (2 frames, tubelets of 2) of identical frames, through an
    image model inflated with the kernel spread evenly: the image model's rollout."""
    config = ViTConfig(image_size=16, patch_size=4, hidden_size=16, mlp_dim=32, num_heads=2,
                       num_layers=2, num_classes=3, classifier=classifier)
    image_model = randomize_weights(VisionTransformer(config), stddev=0.3)
    clip_model = inflate(image_model, frames=2, tubelet_frames=2, layout="joint")
    images = np.random.default_rng(0).uniform(-1, 1, (3, 16, 16, 3)).astype(np.float32)
    expected = attention_rollout(image_model, images)
    expected /= expected.sum(axis=(1, 2), keepdims=True)
    got = space_time_rollout(clip_model, np.repeat(images[:, None], 2, axis=1))
    assert got.shape == (3, 1, 4, 4)
    np.testing.assert_allclose(got[:, 0], expected, atol=1e-6)
    divided = inflate(image_model, frames=2, tubelet_frames=2, layout="divided")
    with pytest.raises(ValueError, match="follows the joint layout.*'divided'"):
        space_time_rollout(divided, np.repeat(images[:, None], 2, axis=1))
