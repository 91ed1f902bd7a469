"""The CNN explorer: what a small CNN's filters see in one image.

Introduced in notebook ``07_training_a_cnn``.

Pick an image with the slider: the panel shows the image, the first convolution's filters,
the feature maps each convolution (after its ReLU) makes of that image, and the predicted
class probabilities. The computation is plain: :func:`layer_outputs` runs the model's layers
one by one and keeps every output.
"""
from __future__ import annotations

import math
import traceback

import numpy as np

from .. import data as dldata
from ..backend import get_device, to_numpy
from ..conv import Conv2d
from ..layers import BatchNorm2d, ReLU, eval_mode
from ..losses import SoftmaxCrossEntropy, softmax
from ..models import CNN
from ..optim import Adam
from ..train import fit
from ._common import FigurePNG, Panel, class_colors, ipywidgets, model_input, status_html

__all__ = ["train_digits_cnn", "conv_filters", "layer_outputs", "feature_maps",
           "CNNExplorer", "cnn_explorer"]

MAX_MAPS = 16      # feature maps (and filters) shown per layer
COLUMNS = 8


def train_digits_cnn(epochs: int = 5, channels=(8, 16), lr: float = 3e-3, seed: int = 0,
                     progress: bool = False):
    """A small :class:`dlcourse.CNN` trained on the 8×8 digits (a few seconds on a CPU).

    conv(1→8)-ReLU-pool-conv(8→16)-ReLU-pool-Linear(16·2·2→10), Adam, batch 32.
    Returns ``(model, history)``; the model is on the default device.
    """
    d = dldata.load_digits(flat=False)                       # X: (N, 1, 8, 8)
    model = CNN(in_channels=1, image_size=(8, 8), num_classes=10, channels=channels,
                seed=seed).to(get_device())
    history = fit(model, SoftmaxCrossEntropy(), Adam(model, lr=lr), d.X_train, d.y_train,
                  epochs=epochs, batch_size=32, validation=(d.X_val, d.y_val), seed=seed,
                  progress=progress)
    return model, history


def _layers(model):
    layers = getattr(model, "layers", None)
    if layers is None:
        raise TypeError(f"The CNN explorer needs a model made of layers (dl.CNN or "
                        f"dl.Sequential), got {type(model).__name__}.")
    return layers


def conv_filters(model) -> np.ndarray:
    """The weights of the model's first :class:`~dlcourse.Conv2d`: NumPy (F, C, KH, KW)."""
    for layer in _layers(model):
        if isinstance(layer, Conv2d):
            return to_numpy(layer.params["W"])
    raise ValueError(f"{type(model).__name__} has no Conv2d layer: there are no filters to show.")


def layer_outputs(model, x) -> list:
    """Run the model's layers one by one on ONE image and keep every output.

    x: (C, H, W) or (1, C, H, W), NumPy or CuPy. Evaluation mode (restored afterwards).
    Returns ``[(name, out), ...]``, one per layer, ``name`` like ``"0 Conv2d"`` and ``out``
    a NumPy array without the batch axis: (F, OH, OW) after a convolution, (K,) logits last.
    """
    x = to_numpy(x)
    if x.ndim == 3:
        x = x[None]
    if x.ndim != 4 or x.shape[0] != 1:
        raise ValueError(f"layer_outputs takes one image (C, H, W) or (1, C, H, W), got "
                         f"{x.shape}.")
    layers = _layers(model)
    with eval_mode(model):
        out = model_input(model, x)
        result = []
        for i, layer in enumerate(layers):
            out = layer.forward(out)
            result.append((f"{i} {type(layer).__name__}", to_numpy(out)[0]))
        return result


def feature_maps(model, x) -> list:
    """The feature maps of each convolution for one image x (C, H, W), taken after the
    convolution's BatchNorm and ReLU when it has them.

    Returns ``[(title, maps), ...]`` with maps a NumPy array (F, OH, OW), e.g.
    ``("conv 1 + ReLU", (8, 8, 8))``.
    """
    outputs = layer_outputs(model, x)
    layers = _layers(model)
    result, n = [], 0
    for i, layer in enumerate(layers):
        if not isinstance(layer, Conv2d):
            continue
        n += 1
        j, title = i, f"conv {n}"
        while j + 1 < len(layers) and isinstance(layers[j + 1], (BatchNorm2d, ReLU)):
            j += 1
            title += " + " + ("BatchNorm" if isinstance(layers[j], BatchNorm2d) else "ReLU")
        result.append((title, outputs[j][1]))
    return result


class CNNExplorer(Panel):
    """Filters and feature maps of a small CNN, one image at a time.

    ``CNNExplorer()`` trains :func:`train_digits_cnn` first (a few seconds); pass your own
    ``model`` (a ``dl.CNN``) and, unless it takes 8×8 digits, ``images`` (N, C, H, W) with
    ``labels`` (N,) and ``classes``. Widgets: ``index`` (slider), ``next_mistake_button``,
    ``image`` (the plot, PNG bytes), ``status``; ``widget`` is the whole panel.
    """

    panel_name = "CNN explorer"

    def __init__(self, model=None, images=None, labels=None, classes=None, index: int = 0,
                 epochs: int = 5, seed: int = 0):
        W = ipywidgets()
        self.history = None
        if model is None:
            model, self.history = train_digits_cnn(epochs=epochs, seed=seed)
        self.model = model
        if images is None:
            size = list(getattr(model, "image_size", [8, 8]))
            if size != [8, 8] or getattr(model, "in_channels", 1) != 1:
                raise ValueError(f"This model takes {getattr(model, 'in_channels', '?')}×"
                                 f"{size[0]}×{size[1]} images, not the 1×8×8 digits: pass "
                                 f"images=X (N, C, H, W), labels=y and classes=... to "
                                 f"CNNExplorer, e.g. the test split of the data you trained on.")
            d = dldata.load_digits(flat=False)
            images, labels, classes = d.X_test, d.y_test, d.classes
        self.images = to_numpy(images)
        if self.images.ndim != 4:
            raise ValueError(f"CNNExplorer needs images of shape (N, C, H, W), got "
                             f"{self.images.shape}. Digits for an MLP are flat (N, 64): load "
                             f"them with dl.data.load_digits(flat=False).")
        self.labels = None if labels is None else to_numpy(labels).astype(np.int64)
        self.probs = self._probabilities()                   # (N, K)
        K = self.probs.shape[1]
        self.classes = tuple(classes) if classes is not None else tuple(map(str, range(K)))
        self.predictions = self.probs.argmax(axis=1)
        self.accuracy = (float((self.predictions == self.labels).mean())
                         if self.labels is not None else None)

        self.index = W.IntSlider(value=index, min=0, max=len(self.images) - 1,
                                 description="image", continuous_update=False,
                                 layout=W.Layout(width="420px"))
        self.index.observe(self._on_index, names="value")
        self.next_mistake_button = W.Button(description="next mistake", icon="forward",
                                            layout=W.Layout(width="140px"),
                                            disabled=self.labels is None)
        self.next_mistake_button.on_click(lambda b: self.next_mistake())
        self.status = W.HTML()
        self.status.add_class("dlcourse-status")
        self.image = W.Image(format="png", layout=W.Layout(max_width="100%"))
        self.image.add_class("dlcourse-cnn-plot")
        self.widget = W.VBox([W.HBox([self.index, self.next_mistake_button]), self.status,
                              self.image])
        self.widget.add_class("dlcourse-cnn-explorer")
        self._build_figure()
        self.redraw()

    def _probabilities(self):
        try:
            with eval_mode(self.model):
                out = []
                for i in range(0, len(self.images), 256):
                    xb = model_input(self.model, self.images[i:i + 256])
                    out.append(to_numpy(softmax(self.model.forward(xb))))
        except Exception as err:
            raise ValueError(f"The model could not run on these images "
                             f"{self.images.shape}: {type(err).__name__}: {err}") from err
        return np.concatenate(out).astype(np.float64)

    # -- the figure: made once; redraw() only updates its artists -------------------------
    def _build_figure(self):
        filters = conv_filters(self.model)[:MAX_MAPS]                     # (F, C, KH, KW)
        maps = feature_maps(self.model, self.images[0])
        sections = [("first-layer filters (red +, blue −)", len(filters))]
        sections += [(f"{title}: {m.shape[0]} feature maps {m.shape[1]}×{m.shape[2]}",
                      min(len(m), MAX_MAPS)) for title, m in maps]
        rows = [math.ceil(n / COLUMNS) for _, n in sections]
        heights = [2.2] + [1.0] * sum(rows)
        self._figure = FigurePNG(figsize=(8.0, 1.0 * sum(heights) + 0.6), dpi=80)
        fig = self._figure.fig
        gs = fig.add_gridspec(len(heights), COLUMNS, height_ratios=heights, hspace=0.45,
                              wspace=0.15, left=0.03, right=0.98, top=0.93, bottom=0.02)
        ax_in = fig.add_subplot(gs[0, 0:2])
        C = self.images.shape[1]
        self.input_artist = ax_in.imshow(self._as_picture(self.images[0]),
                                         cmap="gray_r" if C == 1 else None,
                                         vmin=0, vmax=1, interpolation="nearest")
        ax_in.set_xticks([])
        ax_in.set_yticks([])
        self.input_title = ax_in.set_title("", fontsize=10)
        ax_p = fig.add_subplot(gs[0, 3:])
        K = self.probs.shape[1]
        self.bars = ax_p.bar(np.arange(K), self.probs[0], color="#bbbbbb")
        ax_p.set_ylim(0, 1)
        ax_p.set_xticks(np.arange(K))
        ax_p.set_xticklabels(self.classes if max(len(c) for c in self.classes) <= 3
                             else [c[:6] for c in self.classes], fontsize=8)
        ax_p.set_title("predicted probabilities", fontsize=10)
        self.probs_axes = ax_p

        row = 1
        w = filters[:, 0] if C != 3 else filters
        vmax = float(np.abs(filters).max()) or 1.0
        self.filter_artists = []
        for k in range(len(filters)):
            ax = fig.add_subplot(gs[row + k // COLUMNS, k % COLUMNS])
            if C == 3:        # colour filters: shift and scale into [0, 1] for display
                img = (filters[k].transpose(1, 2, 0) / vmax + 1) / 2
                ax.imshow(img, interpolation="nearest")
            else:
                ax.imshow(w[k], cmap="RdBu_r", vmin=-vmax, vmax=vmax, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if k == 0:
                ax.text(0, 1.08, sections[0][0], transform=ax.transAxes, fontsize=9,
                        va="bottom")
        row += rows[0]
        self.map_artists = []
        for s, (title, m) in enumerate(maps, start=1):
            artists = []
            for k in range(min(len(m), MAX_MAPS)):
                ax = fig.add_subplot(gs[row + k // COLUMNS, k % COLUMNS])
                artists.append(ax.imshow(m[k], cmap="viridis", interpolation="nearest"))
                ax.set_xticks([])
                ax.set_yticks([])
                if k == 0:
                    ax.text(0, 1.08, sections[s][0], transform=ax.transAxes, fontsize=9,
                            va="bottom")
            self.map_artists.append(artists)
            row += rows[s]

    def _on_index(self, change):
        try:                        # a widget callback: errors would vanish into a log
            self.redraw()
        except Exception as err:
            self.status.value = status_html(f"Could not show image {change['new']}: "
                                            f"{type(err).__name__}: {err}", "error",
                                            traceback.format_exc())

    @staticmethod
    def _as_picture(x):
        """(C, H, W) -> what imshow wants: (H, W) grey or (H, W, 3) colour, in [0, 1]."""
        return x[0] if x.shape[0] != 3 else np.clip(x.transpose(1, 2, 0), 0, 1)

    def redraw(self) -> bytes:
        """Show the image at ``self.index.value``; returns the PNG bytes (also put into
        ``self.image.value``)."""
        i = int(self.index.value)
        x = self.images[i]
        maps = feature_maps(self.model, x)
        p = self.probs[i]
        pred = int(self.predictions[i])
        with self._figure.lock:
            self.input_artist.set_data(self._as_picture(x))
            for bar, value, k in zip(self.bars, p, range(len(p))):
                bar.set_height(value)
                bar.set_color(class_colors(2)[1] if k == pred else "#bbbbbb")
            for artists, (_, m) in zip(self.map_artists, maps):
                vmax = float(m[:len(artists)].max()) or 1.0     # one colour scale per layer
                for artist, fmap in zip(artists, m):
                    artist.set_data(fmap)
                    artist.set_clim(min(0.0, float(m.min())), vmax)
            truth = "" if self.labels is None else f", true {self.classes[self.labels[i]]}"
            self.input_title.set_text(f"image {i}{truth}")
            png = self._figure.png()
        self.image.value = png
        if self.labels is None:
            self.status.value = status_html(
                f"Image {i}: predicted {self.classes[pred]} (probability {p[pred]:.2f}).")
        else:
            right = pred == self.labels[i]
            self.status.value = status_html(
                f"Image {i}: true class {self.classes[self.labels[i]]}, predicted "
                f"{self.classes[pred]} (probability {p[pred]:.2f}) — "
                f"{'right' if right else 'wrong'}. Accuracy on all {len(self.images)} images: "
                f"{self.accuracy:.3f}.", "ok" if right else "warn")
        return png

    def next_mistake(self) -> int | None:
        """Move the slider to the next misclassified image (wrapping around); returns its
        index, or None when there is no mistake."""
        if self.labels is None:
            return None
        wrong = np.flatnonzero(self.predictions != self.labels)
        if not len(wrong):
            self.status.value = status_html("The model gets every image right.", "ok")
            return None
        later = wrong[wrong > self.index.value]
        self.index.value = int(later[0] if len(later) else wrong[0])
        return int(self.index.value)

    def __repr__(self) -> str:
        acc = f", accuracy={self.accuracy:.3f}" if self.accuracy is not None else ""
        return f"CNNExplorer(images={self.images.shape}{acc}, index={self.index.value})"


def cnn_explorer(model=None, **kwargs) -> CNNExplorer:
    """Make the CNN explorer (it shows itself when it is the last line of a cell)::

        dl.widgets.cnn_explorer()              # trains a small CNN on the digits first
        dl.widgets.cnn_explorer(model, images=X_test, labels=y_test, classes=classes)
    """
    return CNNExplorer(model=model, **kwargs)
