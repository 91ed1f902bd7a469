"""The playground's picture: one matplotlib figure with the data (and, in the plane, the
decision boundary; for the digits, the predicted labels) on the left, the loss and accuracy
curves on the right. ``PlaygroundFigure`` is the drawing half of :class:`Playground`; it reads
the panel's ``data``, ``history``, ``shown_model`` and ``_run_info``; the panel's ``redraw``
calls it under the figure's lock."""
from __future__ import annotations

import numpy as np
from matplotlib.ticker import MaxNLocator

from ..backend import to_numpy
from ._common import class_colors, model_input
from .decision_boundary import decision_grid, grid_extent, probability_image


class PlaygroundFigure:
    """The drawing methods of the playground panel (see :class:`Playground`)."""

    def _build_figure(self):
        fig = self._figure.fig
        self.ax_data = fig.add_axes([0.025, 0.03, 0.40, 0.82])
        self.ax_loss = fig.add_axes([0.545, 0.60, 0.435, 0.35])
        self.ax_acc = fig.add_axes([0.545, 0.14, 0.435, 0.35])
        ax = self.ax_loss
        ax.set_yscale("log")
        ax.set_ylabel("loss (log scale)")
        ax.grid(True, alpha=0.3)
        (self.line_loss,) = ax.plot([], [], color="C0", label="train")
        (self.line_val_loss,) = ax.plot([], [], color="C1", label="validation")
        self.line_chance_loss = ax.axhline(np.log(2), color="grey", ls="--", lw=1,
                                           label="guessing (ln K)")
        ax.legend(loc="upper right", fontsize=7, framealpha=0.8)
        ax = self.ax_acc
        ax.set_ylabel("accuracy")
        ax.set_xlabel("epoch")
        ax.set_ylim(0, 1.03)
        ax.grid(True, alpha=0.3)
        (self.line_acc,) = ax.plot([], [], color="C0", label="train")
        (self.line_val_acc,) = ax.plot([], [], color="C1", label="validation")
        self.line_chance_acc = ax.axhline(0.5, color="grey", ls="--", lw=1, label="guessing (1/K)")
        ax.legend(loc="lower right", fontsize=7, framealpha=0.8)
        for ax in (self.ax_loss, self.ax_acc):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))

    def _setup_data_axes(self):
        """(Re)create the left plot's artists for the current data set. Called when the data
        set changes, never while training."""
        ax, d = self.ax_data, self.data
        ax.cla()
        K = d.num_classes
        if d.is_2d:
            self._extent = grid_extent(d.X_train)
            blank = np.ones((2, 2, 3))
            self.boundary = ax.imshow(blank, extent=self._extent, origin="lower",
                                      interpolation="bilinear", aspect="auto", zorder=0)
            colors = class_colors(K)[d.y_train]
            ax.scatter(d.X_train[:, 0], d.X_train[:, 1], c=colors, s=16, edgecolors="white",
                       linewidths=0.6, zorder=2)
            ax.set_xlim(self._extent[:2])
            ax.set_ylim(self._extent[2:])
            ax.set_xticks([])
            ax.set_yticks([])
            self.mosaic_texts = []
        else:                       # digits: a mosaic of validation images with predictions
            rows, cols, side = 4, 8, int(round(np.sqrt(d.num_features)))
            gap, label = 1, 4                 # pixels between digits; above each, its label
            n = rows * cols
            mosaic = np.ones((rows * (side + label), cols * (side + gap) - gap))
            for i in range(n):
                r, c = divmod(i, cols)
                top, left = r * (side + label) + label, c * (side + gap)
                mosaic[top:top + side, left:left + side] = 1.0 - d.X_val[i].reshape(side, side)
            ax.imshow(mosaic, cmap="gray", vmin=0, vmax=1, interpolation="nearest")
            self.boundary = None
            self.mosaic_texts = [
                ax.text((i % cols) * (side + gap) + side / 2 - 0.5,
                        (i // cols) * (side + label) + label - 0.8, "", ha="center",
                        va="bottom", fontsize=10, fontweight="bold", color="grey")
                for i in range(n)]
            ax.set_xticks([])
            ax.set_yticks([])
        self.title = ax.set_title(self._data_title(), fontsize=10)
        self.line_chance_loss.set_ydata([np.log(K)] * 2)
        self.line_chance_acc.set_ydata([1.0 / K] * 2)

    def _data_title(self, extra: str = "") -> str:
        d = self.data
        if d.is_2d:
            base = "training points; background: the network's prediction"
        else:
            base = "predicted labels (green: right, red: wrong)"
        return base + (f"\n{extra}" if extra else "")

    def _reset_curves(self, epochs: int):
        for line in (self.line_loss, self.line_val_loss, self.line_acc, self.line_val_acc):
            line.set_data([], [])
        for ax in (self.ax_loss, self.ax_acc):
            ax.set_xlim(0.5, max(epochs, 2) + 0.5)
        K = self.data.num_classes
        self.ax_loss.set_ylim(np.log(K) / 20, np.log(K) * 4)

    def _draw_model(self, resolution):
        d, model = self.data, self.shown_model       # a copy: never the model mid-step
        extra = ""
        if self.history is not None and self.history.epochs:
            extra = (f"epoch {self.history.epochs}: validation accuracy "
                     f"{self.history.val_accuracy[-1]:.2f}")
        self.title.set_text(self._data_title(extra))
        if model is None:
            if self.boundary is not None:
                self.boundary.set_data(np.ones((2, 2, 3)))
            for t in self.mosaic_texts:
                t.set_text("")
            return
        if d.is_2d:
            probs, extent = decision_grid(model, d.X_train, resolution=resolution)
            self.boundary.set_data(probability_image(probs))
            self.boundary.set_extent(extent)
        else:
            n = len(self.mosaic_texts)
            X = model_input(model, d.X_val[:n])
            pred = to_numpy(model.predict(X))
            for t, p, y in zip(self.mosaic_texts, pred, d.y_val[:n]):
                t.set_text(d.classes[int(p)])
                t.set_color("#1b8e20" if p == y else "#d01010")

    def _draw_curves(self):
        h = self.history
        if h is None or not h.epochs:
            for line in (self.line_loss, self.line_val_loss, self.line_acc, self.line_val_acc):
                line.set_data([], [])
            return
        e = np.arange(1, h.epochs + 1)
        marker = "o" if h.epochs <= 30 else ""     # a single epoch is a dot, not a line
        for line in (self.line_loss, self.line_val_loss, self.line_acc, self.line_val_acc):
            line.set_marker(marker)
            line.set_markersize(3)
        self.line_loss.set_data(e, h.train_loss)
        self.line_val_loss.set_data(e[:len(h.val_loss)], h.val_loss)
        if h.train_accuracy and h.train_accuracy[0] is not None:
            self.line_acc.set_data(e, h.train_accuracy)
            self.line_val_acc.set_data(e[:len(h.val_accuracy)], h.val_accuracy)
        finite = [v for v in list(h.train_loss) + list(h.val_loss)
                  if v is not None and np.isfinite(v) and v > 0]
        if finite:
            K = self.data.num_classes
            lo = min(min(finite) / 1.5, np.log(K) / 20)
            hi = max(max(finite) * 1.5, np.log(K) * 4)
            self.ax_loss.set_ylim(lo, hi)
        right = max(self._run_info.get("epochs", h.epochs), h.epochs, 2)
        for ax in (self.ax_loss, self.ax_acc):
            ax.set_xlim(0.5, right + 0.5)
