"""Which library decodes the clip task's videos: PyAV, OpenCV and imageio-ffmpeg side by side.

Each candidate decodes the same files (written here by PyAV: H.264 in .mp4, VP9 in .webm,
MJPEG in .avi, and an animated .gif through Pillow) to RGB uint8 frames; the table gives
frames per second (best of three), whether every frame came back equal in count and shape,
and the installed size of each library. A library that is not installed gets a row saying
so. The clip task reads videos through OpenCV (`vit_app/tasks/clip/data/videos.py`), the
fastest here on every file (results/video_decode.txt); the script exits 1 if it failed a
file or another library that decoded every file is more than 1.25x faster on all of them.

    pip install av opencv-python-headless imageio-ffmpeg
    python benchmarks/video_decode.py [--frames 240] [--size 320x240]
"""

import argparse
import importlib.metadata
import os
import sys
import tempfile
import time

import numpy as np

CHOSEN = "opencv"
CONTAINERS = {"mp4": ("h264", "yuv420p"), "webm": ("libvpx-vp9", "yuv420p"),
              "avi": ("mjpeg", "yuvj420p")}
DISTRIBUTIONS = {"pyav": "av", "opencv": "opencv-python-headless",
                 "imageio-ffmpeg": "imageio-ffmpeg"}
MAX_SLOWER = 1.25


def frames_of(count, width, height):
    """A moving gradient with a square: frames an encoder cannot compress to nothing."""
    rows, cols = np.mgrid[0:height, 0:width]
    for index in range(count):
        frame = np.stack([(rows + index) % 256, (cols * 2 + index) % 256,
                          (rows + cols) % 256], -1).astype(np.uint8)
        top, left = (index * 3) % (height - 20), (index * 5) % (width - 20)
        frame[top:top + 20, left:left + 20] = 255
        yield frame


def write_videos(folder, count, width, height):
    """The test files: {extension: path}."""
    import av
    from PIL import Image

    paths = {}
    for extension, (codec, pixels) in CONTAINERS.items():
        path = os.path.join(folder, f"clip.{extension}")
        with av.open(path, "w") as container:
            stream = container.add_stream(codec, rate=24)
            stream.width, stream.height, stream.pix_fmt = width, height, pixels
            for frame in frames_of(count, width, height):
                for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        paths[extension] = path
    pictures = [Image.fromarray(frame) for frame in frames_of(min(count, 60), width, height)]
    paths["gif"] = os.path.join(folder, "clip.gif")
    pictures[0].save(paths["gif"], save_all=True, append_images=pictures[1:], duration=40)
    return paths


def decode_pyav(path):
    import av

    with av.open(path) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def decode_opencv(path):
    import cv2

    capture, frames = cv2.VideoCapture(path), []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    capture.release()
    return frames


def decode_imageio_ffmpeg(path):
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(path, pix_fmt="rgb24")
    meta = next(reader)
    width, height = meta["size"]
    return [np.frombuffer(raw, np.uint8).reshape(height, width, 3) for raw in reader]


DECODERS = {"pyav": decode_pyav, "opencv": decode_opencv,
            "imageio-ffmpeg": decode_imageio_ffmpeg}


def installed_mb(distribution):
    """The size of a distribution's installed files, or None when it is not installed."""
    try:
        files = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    located = (file.locate() for file in files)
    return sum(os.path.getsize(path) for path in located if os.path.isfile(path)) / 2**20


def measure(name, paths, expected):
    """{extension: (frames per second or None, whether the frames came back whole)}."""
    row = {}
    for extension, path in paths.items():
        try:
            best, frames = float("inf"), []
            for _ in range(3):
                started = time.perf_counter()
                frames = DECODERS[name](path)
                best = min(best, time.perf_counter() - started)
            whole = len(frames) == expected[extension] and all(
                frame.shape == frames[0].shape and frame.dtype == np.uint8 for frame in frames)
            row[extension] = (len(frames) / best, whole)
        except Exception as error:  # a library without the codec: the row says so
            row[extension] = (None, False)
            print(f"{name} {extension}: {type(error).__name__}: {error}", file=sys.stderr)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=240)
    parser.add_argument("--size", default="320x240", help="WIDTHxHEIGHT")
    args = parser.parse_args(argv)
    width, height = (int(side) for side in args.size.split("x"))
    with tempfile.TemporaryDirectory() as folder:
        paths = write_videos(folder, args.frames, width, height)
        expected = {extension: (min(args.frames, 60) if extension == "gif" else args.frames)
                    for extension in paths}
        rows = {}
        for name in DECODERS:
            size = installed_mb(DISTRIBUTIONS[name])
            rows[name] = (size, measure(name, paths, expected) if size is not None else None)
    print(f"decoding {args.frames} frames of {width}x{height} (gif: {expected['gif']}); "
          f"frames per second, best of 3; python {sys.version.split()[0]}")
    print("| library | installed MB | " + " | ".join(paths) + " |")
    print("|---|---:|" + "---:|" * len(paths))
    for name, (size, row) in rows.items():
        if row is None:
            print(f"| {name} | not installed |" + " |" * len(paths))
            continue
        cells = [("FAILED" if rate is None else f"{rate:.0f}" + ("" if whole else " (short)"))
                 for rate, whole in row.values()]
        print(f"| {name} | {size:.0f} | " + " | ".join(cells) + " |")
    return verdict(rows)


def verdict(rows):
    """1 if the chosen library failed a file or another is MAX_SLOWER faster on every file."""
    chosen = rows[CHOSEN][1]
    if chosen is None or not all(whole for _, whole in chosen.values()):
        print(f"FAILED: {CHOSEN} did not decode every file whole")
        return 1
    for name, (_, row) in rows.items():
        if name == CHOSEN or row is None or not all(whole for _, whole in row.values()):
            continue
        ratios = [row[ext][0] / chosen[ext][0] for ext in chosen]
        if min(ratios) > MAX_SLOWER:
            print(f"FAILED: {name} decodes every file {min(ratios):.2f}x faster than {CHOSEN}")
            return 1
    print(f"{CHOSEN} decodes every file; no library that also does is {MAX_SLOWER}x faster "
          "on all of them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
