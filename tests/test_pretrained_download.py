"""Downloading named weights from a loopback mirror of the vit_models bucket: cached once,
verified, never half-written; failures are clear; two processes can share a cold cache."""

import glob
import hashlib
import io
import os
import subprocess
import sys
import threading
import time
import zipfile

import pytest

import vit_keras
from helpers import assert_outputs_equal, random_images
from test_pretrained import REFUSED_URL, TINY_B16, tiny_release_file
from vit_keras import pretrained
from vit_keras.pretrained import download, registry
from weights_server import serving

RELEASE = ("imagenet21k", "B/16")  # 224 px, 21843 classes, pre_logits


@pytest.fixture
def server():
    with serving() as running:
        yield running


@pytest.fixture
def mirror(server, tmp_path, monkeypatch):
    """The loopback server as VIT_KERAS_WEIGHTS_URL, an empty KERAS_HOME, and the tiny
    ImageNet-21k B/16 file served under its bucket path.

    Returns:
        (server, release, the model the file holds, the file's local path).
    """
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    monkeypatch.setenv(registry.BASE_URL_VARIABLE, server.url + "/vit_models")
    release = pretrained.find(*RELEASE)
    source = tiny_release_file(tmp_path / "source.npz", image_size=224, classes=21843,
                               pre_logits=True)
    with open(tmp_path / "source.npz", "rb") as file:
        server.files["/vit_models/" + release.path] = file.read()
    return server, release, source, str(tmp_path / "source.npz")


def _process_env(**extra):
    """The environment of a fresh Python on the JAX backend (quicker to import)."""
    return dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3", **extra)


def leftovers(path):
    """Files of a download into `path` that are still around (the file, temporary parts)."""
    return glob.glob(path + "*")


def test_named_weights_download_once_then_come_from_the_cache(mirror):
    server, release, source, local = mirror
    served_path = "/vit_models/" + release.path
    model = vit_keras.ViTB16(weights="imagenet21k", **TINY_B16)
    assert server.gets(served_path) == 1
    with open(release.cache_path, "rb") as cached, open(local, "rb") as original:
        assert cached.read() == original.read()
    by_path = vit_keras.ViTB16(weights=local, **TINY_B16)
    images = random_images(source, batch=2)
    assert_outputs_equal(model(images), by_path(images), atol=0.0)
    assert_outputs_equal(model(images), source(images), atol=1e-6)
    again = vit_keras.ViTB16(weights="imagenet21k", **TINY_B16)
    assert server.gets(served_path) == 1  # no second request
    assert_outputs_equal(again(images), by_path(images), atol=0.0)
    assert leftovers(release.cache_path) == [release.cache_path]


def test_url_weights_are_cached_under_their_host_and_path(mirror):
    server, release, source, local = mirror
    url = f"{server.url}/vit_models/{release.path}"
    path = pretrained.weights_file(url, quiet=True)
    host = server.url.split("//")[1].replace(":", "_")
    assert path == os.path.join(pretrained.cache_root(), "urls", host, "vit_models",
                                *release.path.split("/"))
    model = vit_keras.ViTB16(weights=url, **TINY_B16)
    images = random_images(source, batch=1)
    assert_outputs_equal(model(images), source(images), atol=1e-6)
    assert server.gets("/vit_models/" + release.path) == 1


def _corrupt(data: bytes) -> bytes:
    """Flips 16 bytes inside the first member (past its local header): the zip stays readable,
    its CRC check fails."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        first = archive.infolist()[0]
    start = first.header_offset + 30 + len(first.filename) + 64  # past the local header
    return data[:start] + bytes(b ^ 0xFF for b in data[start:start + 16]) + data[start + 16:]


@pytest.mark.parametrize("failure, message", [
    ("truncated", r"ended early"),
    ("missing", r"HTTP 404"),
    ("corrupt", r"fails its CRC check"),
    ("refused", r"Connection refused"),
])
def test_a_failed_download_is_named_and_leaves_no_file(mirror, monkeypatch, failure, message):
    server, release, _, _ = mirror
    served_path = "/vit_models/" + release.path
    if failure == "truncated":
        server.truncated.add(served_path)
    elif failure == "missing":
        del server.files[served_path]
    elif failure == "corrupt":
        server.files[served_path] = _corrupt(server.files[served_path])
    else:
        monkeypatch.setenv(registry.BASE_URL_VARIABLE, REFUSED_URL)
    with pytest.raises(pretrained.DownloadError, match=message) as caught:
        vit_keras.ViTB16(weights="imagenet21k", **TINY_B16)
    text = str(caught.value)
    assert release.url in text and release.cache_path in text  # what to fetch, where to put it
    assert registry.BASE_URL_VARIABLE in text
    assert leftovers(release.cache_path) == []


def test_a_wrong_size_or_checksum_is_refused(mirror, tmp_path):
    server, release, _, local = mirror
    url = f"{server.url}/vit_models/{release.path}"
    destination = str(tmp_path / "checked.npz")
    with pytest.raises(pretrained.DownloadError, match="has sha256 [0-9a-f]{64}, expected 0{64}"):
        download.download(url, destination, sha256="0" * 64, quiet=True)
    assert leftovers(destination) == []
    with pytest.raises(pretrained.DownloadError, match=r"has \d+ bytes, expected 12"):
        download.download(url, destination, size=12, quiet=True)
    assert leftovers(destination) == []
    with open(local, "rb") as file:
        digest = hashlib.sha256(file.read()).hexdigest()
    assert download.download(url, destination, sha256=digest, size=os.path.getsize(local),
                             quiet=True) == destination


@pytest.mark.slow
def test_two_processes_share_a_cold_cache(mirror):
    """Both download at once (the server holds each answer until both have asked); each writes
    its own temporary file and renames it, so the cache ends with one whole file."""
    server, release, _, local = mirror
    server.barrier = threading.Barrier(2)
    script = ("from vit_keras import pretrained; "
              "print(pretrained.weights_file('imagenet21k', 'B/16', quiet=True))")
    processes = [subprocess.Popen([sys.executable, "-c", script], env=_process_env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
    outputs = [process.communicate(timeout=240) for process in processes]
    for process, (stdout, stderr) in zip(processes, outputs):
        assert process.returncode == 0, stderr
        assert stdout.strip() == release.cache_path
    assert server.gets("/vit_models/" + release.path) == 2
    with open(release.cache_path, "rb") as cached, open(local, "rb") as original:
        assert cached.read() == original.read()
    assert leftovers(release.cache_path) == [release.cache_path]


def _in_a_process(script, **env):
    """Runs `script` in a fresh Python on the JAX backend (quicker to import); (rc, out, err)."""
    done = subprocess.run([sys.executable, "-c", script], env=_process_env(**env),
                          capture_output=True, text=True, timeout=240)
    return done.returncode, done.stdout.strip(), done.stderr


@pytest.mark.slow
def test_hugging_face_hub_references_download_through_huggingface_hub(mirror, tmp_path):
    """hf:// goes through huggingface_hub and its cache; HF_ENDPOINT (read when it is imported)
    points it at the loopback server, which answers as the Hub does."""
    pytest.importorskip("huggingface_hub")
    server, release, _, local = mirror
    served_path = "/someone/vit-tiny/resolve/main/weights.npz"
    server.files[served_path] = server.files["/vit_models/" + release.path]
    server.headers[served_path] = {"X-Repo-Commit": "0" * 40, "ETag": '"tiny-vit-etag"'}
    script = ("import sys; from vit_keras import pretrained; "
              "print(pretrained.weights_file(sys.argv[1]))")
    hub_env = dict(HF_ENDPOINT=server.url, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="0")
    code, path, stderr = _in_a_process(script.replace("sys.argv[1]",
                                                      "'hf://someone/vit-tiny/weights.npz'"),
                                       **hub_env)
    assert code == 0, stderr
    assert path.startswith(str(tmp_path / "hf"))
    with open(path, "rb") as fetched, open(local, "rb") as original:
        assert fetched.read() == original.read()
    assert server.gets(served_path) == 1
    code, _, stderr = _in_a_process(script.replace("sys.argv[1]", "'hf://someone/missing'"),
                                    **hub_env)
    assert code != 0 and "cannot get model.safetensors of Hugging Face repository " \
        "someone/missing" in stderr


def test_hub_references_parse():
    from vit_keras.pretrained.sources import parse_hub_reference

    assert parse_hub_reference("hf://timm/vit_base_patch16_224.augreg2_in21k_ft_in1k") == (
        "timm/vit_base_patch16_224.augreg2_in21k_ft_in1k", "model.safetensors", None)
    assert parse_hub_reference("hf://google/vit-base-patch16-224/sub/w.safetensors@v1") == (
        "google/vit-base-patch16-224", "sub/w.safetensors", "v1")
    with pytest.raises(ValueError, match="expected hf://ORG/REPO"):
        parse_hub_reference("hf://lonely")


def test_a_truncated_cached_file_is_reported_on_load(mirror):
    """A cache file cut short by something else (a full disk, a copy by hand) is not trusted."""
    _, release, _, local = mirror
    os.makedirs(os.path.dirname(release.cache_path))
    with open(local, "rb") as file, open(release.cache_path, "wb") as cached:
        cached.write(file.read()[:1000])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        vit_keras.ViTB16(weights="imagenet21k", **TINY_B16)


def test_a_mirror_serving_another_file_is_refused_before_caching(mirror, tmp_path):
    """An intact weight file that is not the release (here: 1000 classes, not 21843)."""
    server, release, _, _ = mirror
    tiny_release_file(tmp_path / "other.npz", image_size=224, classes=1000, pre_logits=True)
    with open(tmp_path / "other.npz", "rb") as file:
        server.files["/vit_models/" + release.path] = file.read()
    with pytest.raises(pretrained.DownloadError, match=r"not the one expected: it is not the "
                       r"'imagenet21k' release of ViT-B/16.*'num_classes': 1000"):
        pretrained.weights_file("imagenet21k", "B/16", quiet=True)
    assert leftovers(release.cache_path) == []


def test_hub_references_without_huggingface_hub_say_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails
    with pytest.raises(ValueError, match=r"need huggingface_hub \(a dependency of vit_keras: "
                       r"pip install huggingface_hub\)"):
        pretrained.weights_file("hf://google/vit-base-patch16-224")


@pytest.mark.slow
def test_a_killed_download_leaves_a_part_that_the_next_download_removes(mirror):
    """SIGKILL in the middle of a transfer (the server stalls after half the file): its
    `<file>.<writer>.<pid>.<random>.part` stays; the next download of the file removes it and
    caches the whole file."""
    server, release, _, local = mirror
    server.stalled.add("/vit_models/" + release.path)
    script = ("from vit_keras import pretrained; "
              "pretrained.weights_file('imagenet21k', 'B/16', quiet=True)")
    victim = subprocess.Popen([sys.executable, "-c", script], env=_process_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and victim.poll() is None and not (
            glob.glob(release.cache_path + ".*.part") and server.gets("/vit_models/" +
                                                                      release.path)):
        time.sleep(0.05)
    time.sleep(0.5)  # the first half of the body is on its way
    victim.kill()
    victim.communicate()
    (part,) = glob.glob(release.cache_path + ".*.part")
    assert f".{victim.pid}." in part
    server.stalled.clear()
    assert pretrained.weights_file(*RELEASE, quiet=True) == release.cache_path
    assert leftovers(release.cache_path) == [release.cache_path]
    with open(release.cache_path, "rb") as cached, open(local, "rb") as original:
        assert cached.read() == original.read()


def test_only_the_parts_of_ended_downloads_are_removed(tmp_path):
    destination = str(tmp_path / "ViT-B_16.npz")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    host = download._writer()
    names = {"live": f"ViT-B_16.npz.{host}.{live.pid}.abc.part",
             "ended": f"ViT-B_16.npz.{host}.{ended.pid}.def.part",
             "mine": f"ViT-B_16.npz.{host}.{os.getpid()}.ghi.part",
             "other host, fresh": "ViT-B_16.npz.elsewhere.123.jkl.part",
             "other host, old": "ViT-B_16.npz.elsewhere.456.mno.part",
             "older name, old": "ViT-B_16.npz.pqr.part",
             "another file": "ViT-B_32.npz.elsewhere.1.stu.part",
             "not a part": "ViT-B_16.npz.notes"}
    for name in names.values():
        (tmp_path / name).write_bytes(b"x")
    hour_ago = time.time() - download.STALE_PART_SECONDS - 60
    for key in ("other host, old", "older name, old"):
        os.utime(tmp_path / names[key], (hour_ago, hour_ago))
    try:
        removed = download.remove_stale_parts(destination)
    finally:
        live.kill()
        live.wait()
    gone = {"ended", "other host, old", "older name, old"}
    assert sorted(removed) == sorted(str(tmp_path / names[key]) for key in gone)
    assert sorted(os.listdir(tmp_path)) == sorted(names[key] for key in names if key not in gone)
