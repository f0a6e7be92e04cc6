"""Writes the ImageNet class-name files shipped in `vit_keras/pretrained/`.

The official heads order their classes by WordNet ID: the 1000 ImageNet-1k (ILSVRC-2012)
synsets, and the 21843 synsets of Google's ImageNet-21k (the fall 2011 release plus two). Each
output line is `WNID<TAB>lemmas` (the synset's WordNet 3.0 lemmas, comma-separated, the first
being the short name), in head order. The synset lists and lemmas are read from the data files
of a timm wheel (`pip download timm --no-deps`, unpacked; timm is not imported, nor a
dependency); the ImageNet-1k order is cross-checked against TensorFlow Datasets' `imagenet2012`
labels.

Usage:
  python tools/make_imagenet_labels.py [--info-dir UNPACKED_TIMM/timm/data/_info]
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import os

OUTPUT_DIR = os.path.join(os.path.dirname(__file__), "..", "vit_keras", "pretrained")
SYNSET_FILES = {"imagenet1k.txt": "imagenet_synsets.txt",
                "imagenet21k.txt.gz": "imagenet21k_goog_synsets.txt"}
EXPECTED_COUNTS = {"imagenet1k.txt": 1000, "imagenet21k.txt.gz": 21843}


def installed_dir(package: str, *parts: str) -> str:
    """A data folder of an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{package} is not installed (pip install {package} --no-deps)")
    return os.path.join(spec.submodule_search_locations[0], *parts)


def read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as file:
        return [line.rstrip("\n") for line in file if line.strip()]


def check_order(name: str, wnids: list[str]) -> None:
    """The head order is the sorted WordNet IDs, and ImageNet-1k's is TFDS' too."""
    if len(wnids) != EXPECTED_COUNTS[name] or wnids != sorted(set(wnids)):
        raise SystemExit(f"{name}: expected {EXPECTED_COUNTS[name]} sorted unique synsets")
    if name == "imagenet1k.txt":
        tfds_labels = read_lines(installed_dir("tensorflow_datasets", "datasets",
                                               "imagenet2012", "labels.txt"))
        if wnids != tfds_labels:
            raise SystemExit("imagenet1k: order differs from tensorflow_datasets' imagenet2012")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--info-dir", help="timm's data/_info folder (default: installed timm)")
    args = parser.parse_args()
    info_dir = args.info_dir or installed_dir("timm", "data", "_info")
    lemmas = dict(line.split("\t", 1)
                  for line in read_lines(os.path.join(info_dir, "imagenet_synset_to_lemma.txt")))
    for name, synset_file in SYNSET_FILES.items():
        wnids = read_lines(os.path.join(info_dir, synset_file))
        check_order(name, wnids)
        text = "".join(f"{wnid}\t{lemmas[wnid]}\n" for wnid in wnids).encode("utf-8")
        path = os.path.join(OUTPUT_DIR, name)
        temp = path + ".tmp"
        with (gzip.GzipFile(temp, "wb", mtime=0) if name.endswith(".gz") else
              open(temp, "wb")) as file:
            file.write(text)
        os.replace(temp, path)
        print(f"wrote {path}: {len(wnids)} classes, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
