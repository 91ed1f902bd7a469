"""Models built from the layers: the perceptron, an MLP, a small LeNet-style CNN and a small
residual network.

``Perceptron`` is introduced in notebook ``01_perceptron``, ``MLP`` in ``03_backpropagation``
and ``04a_mlp_on_digits``, ``CNN`` in ``07_training_a_cnn``, ``ResNet`` in
``07b_layernorm_and_residual_networks``.
"""
from __future__ import annotations

import numbers

import numpy as np

from ._validate import check_input, number, shape_str, whole_number
from .backend import rng, to_numpy
from .conv import Conv2d, MaxPool2d
from .layers import (ACTIVATIONS, BatchNorm2d, Dropout, Flatten, GlobalAvgPool2d, Linear, ReLU,
                     Residual, Sequential)


class Perceptron:
    """Rosenblatt's perceptron: a weighted sum and a step.

    predict(x) = 1 if x @ w + b > 0 else 0, for x: (N, D).
    Learning rule, one sample at a time: when a sample is misclassified, move the boundary
    towards it: w += lr * (y - ŷ) * x, b += lr * (y - ŷ). On linearly separable data this stops
    making mistakes after finitely many updates (Novikoff's theorem); on XOR it never does.
    """

    def __init__(self, n_features: int, lr: float = 1.0, max_epochs: int = 100, seed=None):
        self.n_features = whole_number(n_features, "Perceptron(n_features=...)")
        self.lr = number(lr, "Perceptron(lr=...)", "lr=1.0", 0.0, None, low_open=True)
        self.max_epochs = whole_number(max_epochs, "Perceptron(max_epochs=...)")
        self.w = np.zeros(self.n_features)
        self.b = 0.0
        self.seed = seed
        self.errors_: list[int] = []   # mistakes in each epoch

    def _check(self, X):
        X = to_numpy(X)
        check_input(self, X, 2, f"(N, {self.n_features})")
        if X.shape[1] != self.n_features:
            raise ValueError(f"Perceptron(n_features={self.n_features}) got X of shape "
                             f"{shape_str(X.shape)}: the last axis must be {self.n_features}.")
        if not np.isfinite(X).all():   # a NaN compares False: it would "train" on nothing
            row = int(np.argwhere(~np.isfinite(X))[0, 0])
            raise ValueError(f"Perceptron got X with NaN or inf values (first in row {row}): "
                             f"no weights can be learned from them. Fix the data first: "
                             f"~np.isfinite(X) finds them.")
        return X

    def decision_function(self, X):
        """The weighted sum x @ w + b, for each row of X (N, D) -> (N,)."""
        return self._check(X) @ self.w + self.b

    def predict(self, X):
        """Class 0 or 1 for each row of X (N, D) -> (N,) int64."""
        return (self.decision_function(X) > 0).astype(np.int64)

    def fit(self, X, y):
        """Run Rosenblatt's rule from w = 0, b = 0 until an epoch makes no mistake (or
        max_epochs). Fitting again starts again (as scikit-learn's fit does). Returns self."""
        X = self._check(X)
        y = to_numpy(y).reshape(-1)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"Perceptron.fit: {X.shape[0]} samples but {y.shape[0]} labels.")
        if not set(np.unique(y).tolist()) <= {0, 1}:
            raise ValueError(f"Perceptron expects labels 0 and 1, got {sorted(set(np.unique(y).tolist()))}. "
                             f"Map -1/+1 labels with (y > 0).astype(int).")
        order = rng(self.seed)
        self.w, self.b = np.zeros(self.n_features), 0.0
        self.errors_ = []
        for _ in range(self.max_epochs):
            mistakes = 0
            for i in order.permutation(len(X)):
                y_hat = 1 if X[i] @ self.w + self.b > 0 else 0
                if y_hat != y[i]:
                    self.w += self.lr * (y[i] - y_hat) * X[i]
                    self.b += self.lr * (y[i] - y_hat)
                    mistakes += 1
            self.errors_.append(mistakes)
            if mistakes == 0:
                break
        return self

    def score(self, X, y):
        return float((self.predict(X) == to_numpy(y).reshape(-1)).mean())


class MLP(Sequential):
    """Multi-layer perceptron: Linear, activation, ..., Linear (the last without activation).

    sizes = [D, H1, ..., K]: x (N, D) -> logits (N, K).
    ``dropout`` > 0 adds Dropout after each hidden activation. ``init`` is every Linear
    layer's initialization: "he" (default), "xavier" or a std (see :class:`Linear`).
    """

    def __init__(self, sizes, activation: str = "relu", dropout: float = 0.0,
                 dtype=np.float32, seed=None, init="he"):
        given = sizes
        sizes = None if isinstance(given, (str, bytes)) or not hasattr(given, "__iter__") else list(given)
        if sizes is None or any(isinstance(s, bool) or not isinstance(s, numbers.Real)
                                or not np.isfinite(s) or s != int(s) for s in sizes):
            raise TypeError(f"MLP takes a list of whole-number layer sizes [inputs, hidden..., "
                            f"outputs], got {given!r}. E.g. dl.MLP([64, 128, 10]).")
        sizes = [int(s) for s in sizes]
        if len(sizes) < 2:
            raise ValueError(f"MLP needs at least an input and an output size, got sizes={sizes}.")
        if not isinstance(activation, str) or activation not in ACTIVATIONS:
            error = ValueError if isinstance(activation, str) else TypeError
            raise error(f"MLP(activation=...) takes one name, one of {sorted(ACTIVATIONS)} (the "
                        f"same activation after every hidden layer), got {activation!r}. E.g. "
                        f"activation='relu'.")
        gen = rng(seed) if seed is not None else None
        layers = []
        for i, (d_in, d_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(Linear(d_in, d_out, dtype=dtype, seed=_child_seed(gen), init=init))
            if i < len(sizes) - 2:
                layers.append(ACTIVATIONS[activation]())
                if dropout:
                    layers.append(Dropout(dropout))
        super().__init__(*layers)
        self.sizes, self.activation, self.dropout = sizes, activation, float(dropout)
        self.init = layers[0].init

    def get_config(self):
        return {"sizes": self.sizes, "activation": self.activation, "dropout": self.dropout,
                "init": self.init}


class CNN(Sequential):
    """A small LeNet-style CNN for (C, H, W) images:

    conv(C→c1, k, pad k//2) - [BatchNorm] - ReLU - maxpool p -
    conv(c1→c2, k, pad k//2) - [BatchNorm] - ReLU - maxpool p - Flatten - Linear(c2·H'·W' → K)

    with k = ``kernel_size`` (3: 3×3, odd sizes only, so the padding keeps the size), p = ``pool``
    (2: 2×2), each an int or a pair (h, w), and H' = H // ph // ph, W' = W // pw // pw.
    x: (N, C, H, W) -> logits (N, K). With the defaults on 1×28×28 this is
    conv(1→16)-ReLU-pool-conv(16→32)-ReLU-pool-Linear(32·7·7→10). For a 1-D signal of length L
    seen as a 1×L image (MNIST-1D): ``CNN(1, (1, 40), 10, kernel_size=(1, 5), pool=(1, 2))``.
    """

    def __init__(self, in_channels: int = 1, image_size=(28, 28), num_classes: int = 10,
                 channels=(16, 32), batchnorm: bool = False, dropout: float = 0.0,
                 dtype=np.float32, seed=None, kernel_size=3, pool=2):
        H, W = _pair_of_sizes(image_size, "image_size")
        KH, KW = _pair_of_sizes(kernel_size, "kernel_size")
        PH, PW = _pair_of_sizes(pool, "pool")
        if KH % 2 == 0 or KW % 2 == 0:
            raise ValueError(f"CNN(kernel_size=...) must be odd (padding k//2 keeps the size), got "
                             f"{kernel_size!r}. E.g. kernel_size=3 or (1, 5).")
        if H // PH // PH < 1 or W // PW // PW < 1:
            raise ValueError(f"CNN needs images of at least {PH * PH}×{PW * PW} (two {PH}×{PW} "
                             f"poolings), got {H}×{W}. For a 1-D signal use pool=(1, 2) and "
                             f"kernel_size=(1, 5).")
        if isinstance(channels, (str, bytes)) or not hasattr(channels, "__len__") \
                or len(channels) != 2:
            same = (f", or channels=({channels}, {channels}) for {channels} in both"
                    if isinstance(channels, numbers.Integral) else "")
            error = ValueError if isinstance(channels, (list, tuple)) else TypeError
            raise error(f"CNN(channels=...) takes two channel counts (c1, c2), one per "
                        f"convolution, got {channels!r}. E.g. channels=(16, 32){same}.")
        c1, c2 = (whole_number(c, "CNN(channels=...)") for c in channels)
        gen = rng(seed) if seed is not None else None
        k, pad = (KH, KW), (KH // 2, KW // 2)
        layers = [Conv2d(in_channels, c1, k, padding=pad, dtype=dtype, seed=_child_seed(gen))]
        if batchnorm:
            layers.append(BatchNorm2d(c1, dtype=dtype))
        layers += [ReLU(), MaxPool2d((PH, PW)),
                   Conv2d(c1, c2, k, padding=pad, dtype=dtype, seed=_child_seed(gen))]
        if batchnorm:
            layers.append(BatchNorm2d(c2, dtype=dtype))
        layers += [ReLU(), MaxPool2d((PH, PW)), Flatten()]
        if dropout:
            layers.append(Dropout(dropout))
        layers.append(Linear(c2 * (H // PH // PH) * (W // PW // PW), num_classes, dtype=dtype,
                             seed=_child_seed(gen)))
        super().__init__(*layers)
        self.in_channels, self.image_size, self.num_classes = int(in_channels), [H, W], int(num_classes)
        self.channels, self.batchnorm, self.dropout = [c1, c2], bool(batchnorm), float(dropout)
        self.kernel_size, self.pool = [KH, KW], [PH, PW]

    def check(self, x):
        """x: (N, C, H, W) with (H, W) the image_size the CNN was built for (forward and
        dl.infer call this first)."""
        super().check(x)
        if getattr(x, "ndim", None) == 4 and list(x.shape[2:]) != self.image_size:
            H, W = self.image_size
            raise ValueError(f"This CNN was built for {H}×{W} images but got {x.shape[2]}×"
                             f"{x.shape[3]} (x of shape {shape_str(x.shape)}): its last Linear "
                             f"layer's size depends on the image size. Build it for these images: "
                             f"dl.CNN(image_size=({x.shape[2]}, {x.shape[3]}), ...).")

    def get_config(self):
        return {"in_channels": self.in_channels, "image_size": self.image_size,
                "num_classes": self.num_classes, "channels": self.channels,
                "batchnorm": self.batchnorm, "dropout": self.dropout,
                "kernel_size": self.kernel_size, "pool": self.pool}


class ResNet(Sequential):
    """A small residual network (He et al., 2016) for (C, H, W) images:

    stem: conv(C→w1) - BatchNorm - ReLU, then for each stage s = 1, 2, ... (width w_s,
    ``blocks[s]`` blocks) residual blocks, each followed by a ReLU:
    Residual(conv(w→w_s) - BN - ReLU - conv(w_s→w_s) - BN, shortcut), then
    GlobalAvgPool2d - Linear(w_last → K).

    Every conv is k×k with padding k//2 and stride 1 (k = ``kernel_size``, odd; an int or a
    pair (h, w)): the images keep their size all the way (8×8 digits are small enough; a
    ResNet for large images halves the size at each stage with stride 2, not done here). The
    shortcut is the identity, except in the first block of a stage that changes the width:
    there a 1×1 conv and a BatchNorm (a projection) map x to the new width. The global
    average pooling makes the classifier independent of the image size; ``image_size``, if
    given, is checked on every input (as CNN's). x: (N, C, H, W) -> logits (N, K).
    With the defaults: 1 + 2·2·2 = 9 convolutions (and 1 projection) and one Linear.
    For a 1-D signal seen as a 1×L image (MNIST-1D): ``ResNet(1, 10, kernel_size=(1, 5))``.
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10, widths=(16, 32),
                 blocks=(2, 2), image_size=None, kernel_size=3, dtype=np.float32, seed=None):
        widths, blocks = list(widths), list(blocks)
        if not widths or len(widths) != len(blocks):
            raise ValueError(f"ResNet takes one width and one block count per stage, e.g. "
                             f"widths=(16, 32), blocks=(2, 2); got widths={widths}, "
                             f"blocks={blocks}.")
        widths = [whole_number(w, "ResNet(widths=...)") for w in widths]
        blocks = [whole_number(b, "ResNet(blocks=...)") for b in blocks]
        KH, KW = _pair_of_sizes(kernel_size, "kernel_size", "ResNet")
        if KH % 2 == 0 or KW % 2 == 0:
            raise ValueError(f"ResNet(kernel_size=...) must be odd (padding k//2 keeps the "
                             f"size), got {kernel_size!r}. E.g. kernel_size=3 or (1, 5).")
        gen = rng(seed) if seed is not None else None
        k, pad = (KH, KW), (KH // 2, KW // 2)

        def conv_bn(c_in, c_out, size=k, padding=pad):
            return [Conv2d(c_in, c_out, size, padding=padding, dtype=dtype, seed=_child_seed(gen)),
                    BatchNorm2d(c_out, dtype=dtype)]

        layers = conv_bn(in_channels, widths[0]) + [ReLU()]                  # the stem
        c = widths[0]
        for width, n in zip(widths, blocks):
            for _ in range(n):
                block = Sequential(*conv_bn(c, width), ReLU(), *conv_bn(width, width))
                projection = Sequential(*conv_bn(c, width, 1, 0)) if c != width else None
                layers += [Residual(block, projection), ReLU()]
                c = width
        layers += [GlobalAvgPool2d(), Linear(c, num_classes, dtype=dtype, seed=_child_seed(gen))]
        super().__init__(*layers)
        self.in_channels, self.num_classes = int(in_channels), int(num_classes)
        self.widths, self.blocks, self.kernel_size = widths, blocks, [KH, KW]
        self.image_size = (None if image_size is None
                           else list(_pair_of_sizes(image_size, "image_size", "ResNet")))

    def check(self, x):
        """x: (N, C, H, W), with (H, W) the image_size when one was given."""
        super().check(x)
        if (self.image_size is not None and getattr(x, "ndim", None) == 4
                and list(x.shape[2:]) != self.image_size):
            H, W = self.image_size
            raise ValueError(f"This ResNet was built for {H}×{W} images (image_size) but got "
                             f"x of shape {shape_str(x.shape)}. Build it with image_size="
                             f"({x.shape[2]}, {x.shape[3]}), or image_size=None for any size.")

    def get_config(self):
        return {"in_channels": self.in_channels, "num_classes": self.num_classes,
                "widths": self.widths, "blocks": self.blocks, "image_size": self.image_size,
                "kernel_size": self.kernel_size}


def _pair_of_sizes(v, name, model="CNN"):
    """An int or a pair (h, w) of whole numbers >= 1, as a pair (CNN's image_size, kernel_size, pool)."""
    sizes = (v, v) if np.isscalar(v) else tuple(v)
    if len(sizes) != 2:
        raise ValueError(f"{model}({name}=...) takes a size or a pair (h, w), got {v!r}.")
    return tuple(whole_number(s, f"{model}({name}=...)") for s in sizes)


def _child_seed(gen):
    """A seed for one layer drawn from the model's own generator (None: the global one)."""
    return None if gen is None else int(gen.integers(2**31))

