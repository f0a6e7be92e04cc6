"""OpenCV's DNN module as a second ONNX runtime: the 4.x and 5.x releases, each installed by
tools/opencv_envs.sh in a folder of its own, run an .onnx file in a subprocess.

Without the folders the OpenCV checks are left out, saying how to make them; with
VIT_REQUIRE_OPENCV=1 (CI) they fail instead.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.environ.get("VIT_OPENCV_ENVS", os.path.expanduser("~/.cache/vit_keras/opencv"))
MAJORS = ("4", "5")
SETUP = "tools/opencv_envs.sh"

# Operators OpenCV's DNN module does not implement (its own gap, documented in
# docs/deploying.md): ONNX Runtime's dynamic int8 files are made of them.
UNSUPPORTED = {"4": "MatMulInteger", "5": "DynamicQuantizeLinear"}

PROBE = """
import json, sys
import cv2, numpy as np
images = np.load(sys.argv[2])
try:
    net = cv2.dnn.readNetFromONNX(sys.argv[1])
    logits = []
    for image in images:
        net.setInput(image[None])
        logits.append(np.asarray(net.forward()).reshape(-1).tolist())
    print(json.dumps({"version": cv2.__version__, "logits": logits}))
except cv2.error as error:
    print(json.dumps({"version": cv2.__version__, "error": str(error)}))
"""


class OpenCVError(RuntimeError):
    """OpenCV refused or failed to run the file; the message is OpenCV's."""


def opencv_missing() -> str:
    """'' when both OpenCV folders exist, else what is missing and how to install it.

    Raises (pytest.fail): under VIT_REQUIRE_OPENCV=1 a missing OpenCV fails the test.
    """
    missing = [major for major in MAJORS if not os.path.exists(os.path.join(ROOT, major, "cv2"))]
    if not missing:
        return ""
    message = f"OpenCV {', '.join(missing)} not installed in {ROOT}: run {SETUP}"
    if os.environ.get("VIT_REQUIRE_OPENCV") == "1":
        pytest.fail(message)
    return message


def opencv_logits(major: str, onnx_path: str, images, scratch) -> np.ndarray:
    """The logits OpenCV `major` computes for `images` (float32 0..255 NHWC), one at a time.

    Raises:
        OpenCVError: OpenCV could not load or run the file (its message), or crashed.
    """
    path = os.path.join(str(scratch), "opencv_images.npy")
    np.save(path, np.asarray(images, np.float32))
    done = subprocess.run([sys.executable, "-c", PROBE, onnx_path, path], capture_output=True,
                          text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, major)))
    if done.returncode:
        raise OpenCVError(f"OpenCV {major} crashed (exit status {done.returncode}) on "
                          f"{onnx_path}: {done.stderr[-1000:]}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    if "error" in answer:
        raise OpenCVError(answer["error"])
    return np.asarray(answer["logits"], np.float32)
