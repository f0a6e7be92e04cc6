"""What a `weights=` argument names, and the local file it comes down to.

- a registered weight name ('imagenet21k+imagenet2012'): the release for the model's
  architecture, downloaded once into the Keras cache;
- an `http(s)://` URL: downloaded once into the cache (under `urls/HOST/PATH`);
- `hf://ORG/REPO[/FILE][@REVISION]`: a Hugging Face Hub repository (timm or transformers ViT),
  through `huggingface_hub` and its own cache; FILE defaults to `model.safetensors`;
- anything else: a local or `gs://` path, used as it is.

`preset_directory` does the same for keras-hub preset folders (a folder, `hf://ORG/REPO` or
`kaggle://OWNER/MODEL/keras/VARIANT[/VERSION]`).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import os
import urllib.parse

from vit_keras.checkpoints.read import read_checkpoint
from vit_keras.config import get_variant
from vit_keras.pretrained import download, registry, trained

HF_SCHEME = "hf://"
HF_DEFAULT_FILE = "model.safetensors"


def local_weights(weights: str, variant: str | None = None, *,
                  quiet: bool = False) -> tuple[str, registry.Release | None]:
    """The local (or `gs://`) path of `weights`, downloading it first when needed.

    Args:
        weights: a weight name, URL, `hf://` reference or path (see the module docstring).
        variant: the architecture a weight name is for ('B/16'); ignored otherwise.
        quiet: no download progress output.

    Returns:
        (path, the `Release` when `weights` is a weight name, else None).

    Raises:
        ValueError: not a string, unknown release, or a failed download (`DownloadError`).
    """
    if not isinstance(weights, str) or not weights:
        raise ValueError("weights must be None, a weight name (see `vit weights list`), a URL, "
                         f"hf://ORG/REPO or a file path, got {weights!r}")
    if weights.startswith(("http://", "https://")):
        return download.download(weights, url_cache_path(weights), quiet=quiet), None
    if weights.startswith(HF_SCHEME):
        return hub_file(weights), None
    if registry.is_weight_name(weights):
        release = registry.find(weights, variant)
        path = download.download(
            release.url, release.cache_path, size=release.size, sha256=release.sha256,
            validate=functools.partial(_release_problem, release), quiet=quiet,
            hint=f"or set {registry.BASE_URL_VARIABLE} to a mirror of the vit_models bucket")
        return path, release
    _refuse_misspelt_name(weights)
    return weights, None


def _release_problem(release: registry.Release, path: str) -> str | None:
    """Why a downloaded file is not `release` (read as its architecture), or None."""
    architecture = get_variant(release.variant)
    try:
        checkpoint = read_checkpoint(path, architecture.num_heads)
    except ValueError as error:
        return str(error)
    return trained.release_mismatch(release, trained.trained_config_fields(checkpoint,
                                                                           architecture))


def _refuse_misspelt_name(weights: str) -> None:
    """A missing 'file' that is one letter from a weight name is a misspelt name."""
    if os.path.exists(weights) or "://" in weights:
        return
    close = difflib.get_close_matches(weights, registry.weight_names(), n=1, cutoff=0.85)
    if close:
        raise ValueError(f"weights {weights!r} is neither a file nor a weight name; did you "
                         f"mean {close[0]!r}? (`vit weights list` shows them)")


def url_cache_path(url: str) -> str:
    """Where a file downloaded from `url` is cached.

    Args:
        url: an http(s) URL naming a file.

    Returns:
        `urls/HOST/PATH` under the Keras cache; a query string's hash prefixes the file name.
    """
    parts = urllib.parse.urlsplit(url)
    segments = [_safe(segment) for segment in parts.path.split("/")
                if segment not in ("", ".", "..")]
    if not segments:
        raise ValueError(f"weights URL {url!r} names no file")
    if parts.query:
        digest = hashlib.sha256(parts.query.encode()).hexdigest()[:12]
        segments[-1] = f"{digest}-{segments[-1]}"
    return os.path.join(download.cache_root(), "urls", _safe(parts.netloc), *segments)


def _safe(segment: str) -> str:
    """A URL path segment as a file name on every OS (no ':', '*', '?', ...)."""
    return "".join("_" if char in '<>:"\\|?*' else char for char in segment)


def parse_hub_reference(reference: str) -> tuple[str, str, str | None]:
    """Splits a Hugging Face Hub reference.

    Args:
        reference: 'hf://ORG/REPO[/FILE][@REVISION]'.

    Returns:
        (repo_id, filename (default model.safetensors), revision or None).
    """
    body, _, revision = reference[len(HF_SCHEME):].partition("@")
    parts = [part for part in body.split("/") if part]
    if len(parts) < 2:
        raise ValueError(f"expected hf://ORG/REPO[/FILE][@REVISION], got {reference!r}")
    filename = "/".join(parts[2:]) or HF_DEFAULT_FILE
    return f"{parts[0]}/{parts[1]}", filename, revision or None


def hub_file(reference: str) -> str:
    """Downloads (or finds in huggingface_hub's cache) a file of a Hub repository.

    Args:
        reference: 'hf://ORG/REPO[/FILE][@REVISION]'.

    Returns:
        The local path.
    """
    repo_id, filename, revision = parse_hub_reference(reference)
    try:
        import huggingface_hub
    except ImportError:
        raise ValueError(f"{reference!r}: hf:// weights need huggingface_hub "
                         "(a dependency of vit_keras: pip install huggingface_hub)") from None
    try:
        return huggingface_hub.hf_hub_download(repo_id, filename, revision=revision)
    except Exception as error:  # the hub's errors have no common base beyond this
        raise download.DownloadError(
            f"cannot get {filename} of Hugging Face repository {repo_id}: "
            f"{type(error).__name__}: {error}") from None


def weights_file(weights: str, variant: str | None = None, *, quiet: bool = False) -> str:
    """The local path of `weights`, downloaded into the Keras cache first when needed.

    Args:
        weights: a weight name ('imagenet21k'), an http(s) URL, `hf://ORG/REPO[/FILE]` or a
            path (returned as it is).
        variant: the architecture a weight name is for ('B/16').
        quiet: no download progress output.

    Returns:
        The path.
    """
    return local_weights(weights, variant, quiet=quiet)[0]


KAGGLE_SCHEME = "kaggle://"


def preset_directory(preset: str, files: tuple[str, ...], required: tuple[str, ...]) -> str:
    """The local folder of a keras-hub preset, downloaded first when it is remote.

    Args:
        preset: a local folder, `hf://ORG/REPO[@REVISION]` (its preset files through
            huggingface_hub and its cache) or `kaggle://OWNER/MODEL/keras/VARIANT[/VERSION]`
            (through kagglehub, which keras-hub installs).
        files: the preset's file names to fetch from the Hub (absent optional ones are skipped).
        required: those that must be there.

    Returns:
        The folder.

    Raises:
        ValueError: a folder that does not exist, a missing required file, or a failed download.
    """
    if not isinstance(preset, str) or not preset:
        raise ValueError(f"a keras-hub preset is a folder, hf://ORG/REPO or kaggle://HANDLE, "
                         f"got {preset!r}")
    if preset.startswith(HF_SCHEME):
        return _hub_preset(preset, files, required)
    if preset.startswith(KAGGLE_SCHEME):
        return _kaggle_preset(preset)
    if not os.path.isdir(preset):
        raise ValueError(f"keras-hub preset {preset!r} is not a folder (expected one holding "
                         f"{', '.join(required)}), nor hf://ORG/REPO or kaggle://HANDLE")
    return preset


def _hub_preset(preset: str, files, required) -> str:
    """Each preset file of a Hub repository, into huggingface_hub's cache; their folder."""
    repo_id, filename, revision = parse_hub_reference(preset)
    if filename != HF_DEFAULT_FILE:
        raise ValueError(f"{preset!r}: a keras-hub preset is a whole repository, "
                         "hf://ORG/REPO[@REVISION], not a file in it")
    folder = None
    for name in files:
        reference = f"hf://{repo_id}/{name}" + (f"@{revision}" if revision else "")
        try:
            folder = os.path.dirname(hub_file(reference))
        except download.DownloadError as error:
            if name in required or "404" not in str(error) and "NotFound" not in str(error):
                raise
    return folder


def _kaggle_preset(preset: str) -> str:
    handle = preset[len(KAGGLE_SCHEME):]
    try:
        import kagglehub
    except ImportError:
        raise ValueError(f"{preset!r}: kaggle:// presets download through kagglehub "
                         "(pip install kagglehub)") from None
    try:
        return kagglehub.model_download(handle)
    except Exception as error:  # kagglehub's errors have no common base beyond this
        raise download.DownloadError(f"cannot download Kaggle model {handle}: "
                                     f"{type(error).__name__}: {error}") from None
