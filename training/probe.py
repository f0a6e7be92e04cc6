"""Linear probe (`--finetune probe`): a linear head fitted once on frozen features.

The features every head reads (the pooled, final-normed representation, through pre_logits
when the model has it) are computed once for the training images, without augmentation. Each
head is then the minimiser of the cross-entropy (softmax, or sigmoid for a multi-label
objective) plus an L2 penalty on standardised features, found by L-BFGS; the standardisation
is folded back into the kernel and bias, so the result is an ordinary head. With
`probe_l2 = 0` the penalty is chosen from `L2_GRID` on a held-out fifth of the features.
"""

from __future__ import annotations

import keras
import numpy as np
from scipy import optimize

L2_GRID = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
MAX_ITERATIONS = 500


def head_features(network: keras.Model, heads: list, dataset) -> tuple[list[np.ndarray], np.ndarray]:
    """The inputs of `heads` for every example of `dataset`, and its targets.

    Args:
        network: the model.
        heads: its head layers (`head`, and `head_dist` for DeiT models).
        dataset: batches of (images, one-hot or multi-hot targets): a `tf.data.Dataset` (read
            as numpy, for every backend) or any iterable.

    Returns:
        (one float64 [examples, width] array per head, float64 [examples, classes] targets).
    """
    extractor = keras.Model(network.inputs[0], [head.input for head in heads])
    parts, targets = [[] for _ in heads], []
    batches = dataset.as_numpy_iterator() if hasattr(dataset, "as_numpy_iterator") else dataset
    for images, labels in batches:
        outputs = extractor(images, training=False)
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        for part, output in zip(parts, outputs):
            part.append(np.asarray(keras.ops.convert_to_numpy(output), np.float64))
        targets.append(np.asarray(labels, np.float64))
    return [np.concatenate(part) for part in parts], np.concatenate(targets)


def _loss_and_gradient(params, features, targets, l2, multilabel):
    width, classes = features.shape[1], targets.shape[1]
    kernel, bias = params[:width * classes].reshape(width, classes), params[width * classes:]
    logits = features @ kernel + bias
    if multilabel:
        loss = np.mean(np.sum(np.logaddexp(0.0, logits) - targets * logits, axis=1))
        error = 1.0 / (1.0 + np.exp(-logits)) - targets
    else:
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        loss = -np.mean(np.sum(targets * log_probabilities, axis=1))
        error = np.exp(log_probabilities) * targets.sum(axis=1, keepdims=True) - targets
    count = len(features)
    loss += 0.5 * l2 * np.sum(kernel * kernel)
    gradient_kernel = features.T @ error / count + l2 * kernel
    return loss, np.concatenate([gradient_kernel.ravel(), error.sum(axis=0) / count])


def _fit_standardised(features, targets, l2, multilabel):
    width, classes = features.shape[1], targets.shape[1]
    start = np.zeros(width * classes + classes)
    result = optimize.minimize(_loss_and_gradient, start, jac=True, method="L-BFGS-B",
                               args=(features, targets, l2, multilabel),
                               options={"maxiter": MAX_ITERATIONS})
    return result.x[:width * classes].reshape(width, classes), result.x[width * classes:]


def fit_linear(features: np.ndarray, targets: np.ndarray, l2: float,
               multilabel: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The kernel [width, classes] and bias [classes] of a regularised linear classifier.

    Args:
        features: [examples, width].
        targets: [examples, classes] one-hot (or soft) targets, or multi-hot ones.
        l2: penalty on the kernel of the standardised features.
        multilabel: sigmoid cross-entropy per class instead of softmax cross-entropy.

    Returns:
        (kernel, bias) acting on the raw features.
    """
    mean, std = features.mean(axis=0), np.maximum(features.std(axis=0), 1e-6)
    kernel, bias = _fit_standardised((features - mean) / std, targets, l2, multilabel)
    kernel = kernel / std[:, None]
    return kernel, bias - mean @ kernel


def _held_out_loss(features, targets, l2, multilabel, seed):
    order = np.random.default_rng(seed).permutation(len(features))
    held = order[:max(1, len(order) // 5)]
    kept = order[len(held):]
    kernel, bias = fit_linear(features[kept], targets[kept], l2, multilabel)
    params = np.concatenate([kernel.ravel(), bias])
    return _loss_and_gradient(params, features[held], targets[held], 0.0, multilabel)[0]


def choose_l2(features: np.ndarray, targets: np.ndarray, multilabel: bool = False,
              seed: int = 0) -> float:
    """The penalty of `L2_GRID` with the lowest cross-entropy on a held-out fifth."""
    losses = [_held_out_loss(features, targets, l2, multilabel, seed) for l2 in L2_GRID]
    return L2_GRID[int(np.argmin(losses))]


def fit_probe(network: keras.Model, heads: list, dataset, l2: float = 0.0,
              multilabel: bool = False, seed: int = 0) -> dict:
    """Sets every head of `network` to the linear classifier fitted on its features.

    Args:
        network: the model (its other weights are not touched).
        heads: the head layers to fit (`training.finetune.head_layers` without pre_logits).
        dataset: batches of (images, targets) of the training data, without augmentation.
        l2: the penalty; 0 = chosen by `choose_l2` (on the first head's features).
        multilabel: fit sigmoid heads.
        seed: seed of the held-out split.

    Returns:
        {'examples': number of feature vectors, 'l2': the penalty used}.
    """
    features, targets = head_features(network, heads, dataset)
    if not l2:
        l2 = choose_l2(features[0], targets, multilabel, seed)
    for head, head_inputs in zip(heads, features):
        kernel, bias = fit_linear(head_inputs, targets, l2, multilabel)
        head.kernel.assign(kernel.astype(np.float32))
        head.bias.assign(bias.astype(np.float32))
    return {"examples": len(targets), "l2": l2}
