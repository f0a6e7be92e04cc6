#!/usr/bin/env bash
# Downloads the wheels that benchmarks/backends_gpu.py and benchmarks/saved_residuals.py need on
# the GPU machine beyond what it has (JAX, PyTorch, timm; no Keras, keras-hub or TensorFlow)
# into .whl/ (ignored by git), for Python 3.12 on x86-64 Linux. Their other needs (absl-py, rich,
# h5py, ml-dtypes, regex, sentencepiece, tokenizers, protobuf, requests) are in the machine's
# image (/work/.library/device/KINDS.md lists it). On that machine:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site
# Usage: tools/gpu_wheels.sh [FOLDER]
set -euo pipefail
folder="${1:-.whl}"
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
           manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$tag")
done
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp "${platforms[@]}" -d "$folder" \
  keras==3.15.1 keras-hub==0.32.0 namex optree kagglehub kagglesdk
ls "$folder"
