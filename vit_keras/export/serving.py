"""SavedModel export with TF Serving signatures for float pixels and for encoded image files."""

from __future__ import annotations

import keras
import tensorflow as tf

from vit_keras import atomic, tasks
from vit_keras.export import graph
from vit_keras import preprocessing as rules
from vit_keras.core.model import input_image_size, preprocessing_of

SERVING_DEFAULT = "serving_default"
SERVE_BYTES = "serve_bytes"
MAX_IMAGE_PIXELS = rules.MAX_IMAGE_PIXELS


def declared_pixels(encoded: tf.Tensor) -> tf.Tensor:
    """Width x height from the header of one encoded JPEG/PNG/BMP/GIF, without decoding it.

    Args:
        encoded: scalar string tensor, the file's bytes.

    Returns:
        int64 scalar; 0 for other formats (the decoder then rejects them).
    """
    head = tf.io.decode_raw(tf.strings.substr(encoded + b"\0" * 26, 0, 26), tf.uint8)
    head = tf.cast(head, tf.int64)

    def big_endian_32(i):
        return head[i] * 2**24 + head[i + 1] * 2**16 + head[i + 2] * 2**8 + head[i + 3]

    def little_endian(i, size):
        return sum(head[i + k] * 2 ** (8 * k) for k in range(size))

    def signed_32(value):
        return tf.abs(tf.where(value >= 2**31, value - 2**32, value))

    def starts_with(signature):
        return tf.equal(tf.strings.substr(encoded, 0, len(signature)), signature)

    def jpeg():
        return tf.reduce_prod(tf.cast(tf.image.extract_jpeg_shape(encoded)[:2], tf.int64))

    pixels = tf.cond(starts_with(b"\xff\xd8\xff"), jpeg, lambda: tf.constant(0, tf.int64))
    pixels = tf.where(starts_with(b"\x89PNG\r\n\x1a\n"), big_endian_32(16) * big_endian_32(20),
                      pixels)
    pixels = tf.where(starts_with(b"GIF"), little_endian(6, 2) * little_endian(8, 2), pixels)
    return tf.where(starts_with(b"BM"), signed_32(little_endian(18, 4)) *
                    signed_32(little_endian(22, 4)), pixels)


class _ServingFunctions:
    """The two serving functions over one float32 model, ready to register as endpoints."""

    def __init__(self, model: keras.Model, include_preprocessing: bool, image_size=None,
                 activation=None):
        self.preprocessing = preprocessing_of(model)
        self.task = tasks.contract(tasks.task_of(model))
        if image_size is not None or not graph.takes_any_size(model):
            model = graph.at_image_size(model, image_size)
        self.model = graph.float32_model(model)
        logits_model, self._activation = graph.split_activation(self.model, activation)
        # serve_bytes resizes to the training size; serving_default of an any-size model
        # takes any size.
        self.height, self.width = input_image_size(self.model)
        fixed = not graph.takes_any_size(self.model)
        # A clip model's inputs carry its frames before the image axes; its files come a
        # clip's frames at a time.
        self.frames = tuple(graph.sample_shape(self.model)[:-3]) if fixed else ()
        self.images_spec = tf.TensorSpec(
            [None, *self.frames, self.height if fixed else None, self.width if fixed else None,
             3], tf.float32, name="images")
        # One trace of the model that every endpoint calls: traced inside each endpoint (and
        # again when it is saved), the model's graph was built six times.
        self._logits = tf.function(
            graph.logits_function(logits_model, include_preprocessing, self.preprocessing),
            input_signature=[self.images_spec], autograph=False)
        self.bytes_spec = tf.TensorSpec([None, *self.frames], tf.string, name="image_bytes")

    def _outputs(self, images):
        logits = self._logits(images)
        probabilities = tf.cast(self._activation(logits), tf.float32)
        outputs = {"probabilities": probabilities, "logits": logits}
        if self.task.derived_outputs is not None:
            outputs.update(self.task.derived_outputs(logits))
        return outputs

    def serve(self, images):
        return self._outputs(images)

    def serve_derived(self, images):
        """The task's derived outputs alone (its `derived_endpoint`)."""
        return self.task.derived_outputs(self._logits(images))

    def serve_bytes(self, image_bytes):
        image = tf.TensorSpec([self.height, self.width, 3], tf.float32)
        if not self.frames:
            return self._outputs(tf.map_fn(self._decode, image_bytes, fn_output_signature=image))
        clip = tf.TensorSpec([*self.frames, self.height, self.width, 3], tf.float32)
        return self._outputs(tf.map_fn(
            lambda frames: tf.map_fn(self._decode, frames, fn_output_signature=image),
            image_bytes, fn_output_signature=clip))

    def _decode(self, encoded):
        """One JPEG/PNG/BMP/GIF file -> float32 RGB 0..255 at the model's resolution.

        A corrupt or unsupported file fails this request with an InvalidArgumentError naming the
        problem; the server keeps running.
        """
        tf.debugging.assert_greater(
            tf.strings.length(encoded), 0,
            message="serve_bytes: got an empty string; expected an encoded JPEG, PNG, BMP or "
                    "GIF image")
        small_enough = tf.debugging.assert_less_equal(
            declared_pixels(encoded), tf.constant(MAX_IMAGE_PIXELS, tf.int64),
            message=f"serve_bytes: the image declares more than {MAX_IMAGE_PIXELS} pixels "
                    "(width x height); refused as a possible decompression bomb")
        with tf.control_dependencies([small_enough]):  # check before allocating
            image = rules.decode_image(encoded)
        if self.task.whole_image:
            return tf.image.resize(tf.cast(image, tf.float32), (self.height, self.width),
                                   method="bilinear", antialias=True)
        return rules.resize_image(image, (self.height, self.width), self.preprocessing)


def saved_model(model: keras.Model, path: str, *, include_preprocessing: bool = True,
                image_size=None, activation=None) -> str:
    """Writes `model` as a TensorFlow SavedModel for TF Serving / Vertex AI.

    Signatures (batch dimension dynamic in both):
    - `serving_default`: `images` float32 [batch, H, W, 3], RGB 0..255 ->
      `probabilities` and `logits` float32 [batch, classes]. A model taking any size
      (`dynamic_image_size`) takes [batch, any height, any width, 3] here, unless
      `image_size` fixes it.
    - `serve_bytes`: `image_bytes` string [batch] of encoded JPEG, PNG, BMP or GIF files
      (grayscale and RGBA become RGB; GIFs use their first frame), resized (and cropped) to
      H x W by the weights' rule (`model.preprocessing`: the official bilinear squash, or
      e.g. timm's bicubic resize and centre crop) inside the graph -> the same outputs.
      H x W is the model's input size: for a model taking any size, `image_size` or else its
      training size.
    A clip model (`vit_keras.tasks.clip`) takes `images` [batch, frames, H, W, 3] and
    `image_bytes` [batch, frames], each clip's frames as encoded files, each resized whole.
    The model's task (`vit_keras.tasks`) may add outputs and a signature. A segmenter
    (`ViTSegmenter`, logits [batch, H, W, classes]) gives those per pixel, adds `class_ids`
    int32 [batch, H, W] (the argmax) to both, resizes encoded images whole (bilinear, never
    cropped), and has a third signature:
    - `serve_class_ids`: `images` as `serving_default` takes them -> `class_ids` only, the
      answer a client usually wants, without the [batch, H, W, classes] float maps.

    Args:
        model: a Keras image classifier taking [batch, H, W, 3] (e.g. from `VisionTransformer`).
            Mixed-precision models are exported as float32. A model ending in an `Activation`
            layer (e.g. softmax) gives its input as `logits`; otherwise `activation` of the
            output gives `probabilities`.
        path: destination directory (local or gs://). Written to a temporary sibling and renamed,
            so a failed export leaves nothing under `path`.
        include_preprocessing: normalise 0..255 inside the graph as the weights expect
            (`model.preprocessing`: [-1, 1] for the official ones).
            False when the model already takes 0..255 pixels.
        image_size: (height, width) fixing both signatures' size; only for a model taking any
            size (None: any size in `serving_default`).
        activation: what gives `probabilities` from the logits of a model that outputs logits:
            'softmax' (None) or 'sigmoid' (a multi-label classifier: independent per-class
            scores).

    Returns:
        `path`.

    Raises:
        RuntimeError: Keras does not run on TensorFlow.
    """
    graph.require_tensorflow("SavedModel export")
    archive = _archive(_ServingFunctions(model, include_preprocessing, image_size, activation))
    with atomic.staged_path(path) as temporary:
        archive.write_out(temporary, verbose=False)
    return path


def _archive(functions: _ServingFunctions) -> keras.export.ExportArchive:
    """The endpoints of `saved_model` over one model's serving functions."""
    # keras.export.ExportArchive (rather than a bare tf.Module) registers the Keras variables
    # so that TF1-style loaders (TF Serving, saved_model_cli) restore them too.
    archive = keras.export.ExportArchive()
    archive.track(functions.model)
    archive.add_endpoint(SERVING_DEFAULT, functions.serve, input_signature=[functions.images_spec])
    archive.add_endpoint(SERVE_BYTES, functions.serve_bytes,
                         input_signature=[functions.bytes_spec])
    if functions.task.derived_endpoint:
        archive.add_endpoint(functions.task.derived_endpoint, functions.serve_derived,
                             input_signature=[functions.images_spec])
    return archive
