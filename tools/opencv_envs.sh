#!/usr/bin/env bash
# OpenCV's DNN module in two majors, each in a folder of its own (pip --target, no
# dependencies: the project's NumPy serves), for the tests that load the exported .onnx files
# in OpenCV as well as ONNX Runtime (tests/opencv_runtime.py). Both majors are named
# `cv2`, so they cannot share one environment.
#   tools/opencv_envs.sh [FOLDER]     default: $VIT_OPENCV_ENVS or ~/.cache/vit_keras/opencv
set -euo pipefail
root="${1:-${VIT_OPENCV_ENVS:-$HOME/.cache/vit_keras/opencv}}"
install() {  # major, requirement
    if [ -f "$root/$1/.installed" ] && [ "$(cat "$root/$1/.installed")" = "$2" ]; then return; fi
    rm -rf "$root/$1"
    python -m pip install --quiet --no-deps --target "$root/$1" "$2"
    echo "$2" > "$root/$1/.installed"
}
install 4 "opencv-python-headless==4.14.0.94"
install 5 "opencv-python-headless==5.0.0.93"
echo "OpenCV 4 and 5 in $root"
