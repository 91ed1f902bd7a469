"""Two plots the notebooks draw again and again: a training history and a confusion matrix.

Used from notebook ``04a_mlp_on_digits`` on; ``plot_ladder`` in the GPU lesson ``08b`` (the
matmul ladder). matplotlib is imported only when a plot is drawn,
so ``import dlcourse`` stays fast and works without it.
"""
from __future__ import annotations

import numpy as np

__all__ = ["plot_history", "plot_confusion_matrix", "plot_ladder"]


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("Plotting needs matplotlib: pip install matplotlib") from None
    return plt


def plot_history(history, axes=None):
    """Loss (left) and accuracy (right) per epoch, training and validation.

    history: a :class:`dlcourse.train.History` from ``dl.fit``.
    axes: two matplotlib axes to draw on, or ``None`` for a new figure.
    Returns the figure.
    """
    plt = _pyplot()
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    else:
        fig = axes[0].figure
    ax_loss, ax_acc = axes
    epochs = np.arange(1, history.epochs + 1)
    ax_loss.plot(epochs, history.train_loss, "o-", label="train")
    if any(v is not None for v in history.val_loss):
        ax_loss.plot(epochs[:len(history.val_loss)], history.val_loss, "o-", label="validation")
    ax_loss.set(xlabel="epoch", ylabel="loss", title="Loss")
    ax_loss.legend()
    if any(v is not None for v in history.train_accuracy):
        ax_acc.plot(epochs, history.train_accuracy, "o-", label="train (during the epoch)")
    if any(v is not None for v in history.val_accuracy):
        ax_acc.plot(epochs[:len(history.val_accuracy)], history.val_accuracy, "o-",
                    label="validation")
    ax_acc.set(xlabel="epoch", ylabel="accuracy", title="Accuracy")
    if ax_acc.get_legend_handles_labels()[0]:
        ax_acc.legend()
    fig.tight_layout()
    return fig


def plot_confusion_matrix(cm, classes=None, ax=None, normalize: bool = False):
    """Draw a confusion matrix (rows: true class, columns: predicted class).

    cm: (K, K) counts from ``dl.confusion_matrix``; classes: K names (default 0..K-1);
    normalize: show each row as fractions (the recall of each class on the diagonal).
    Returns the figure.
    """
    plt = _pyplot()
    cm = np.asarray(cm)
    if cm.ndim != 2 or cm.shape[0] != cm.shape[1]:
        raise ValueError(f"plot_confusion_matrix expects a square (K, K) matrix, got shape {cm.shape}.")
    K = cm.shape[0]
    classes = [str(c) for c in (classes if classes is not None else range(K))]
    if len(classes) != K:
        raise ValueError(f"plot_confusion_matrix got {len(classes)} class names for a {K}×{K} matrix.")
    values = cm / np.maximum(cm.sum(axis=1, keepdims=True), 1) if normalize else cm
    if ax is None:
        fig, ax = plt.subplots(figsize=(0.5 * K + 2, 0.5 * K + 1.5))
    else:
        fig = ax.figure
    image = ax.imshow(values, cmap="Blues")
    fig.colorbar(image, ax=ax)
    ax.set(xticks=range(K), yticks=range(K), xticklabels=classes, yticklabels=classes,
           xlabel="predicted class", ylabel="true class", title="Confusion matrix")
    threshold = values.max() / 2 if values.size else 0
    for i in range(K):
        for j in range(K):
            text = f"{values[i, j]:.2f}" if normalize else f"{int(values[i, j])}"
            ax.text(j, i, text, ha="center", va="center", fontsize=8,
                    color="white" if values[i, j] > threshold else "black")
    fig.tight_layout()
    return fig


def plot_ladder(values, title: str, ax=None, percent_of: str | None = None,
                published: bool = False, unit: str = "GFLOP/s"):
    """Bars of a matmul ladder, ``values = {rung: number}``, each labelled with its value (and
    its share of ``values[percent_of]`` when given). ``published=True`` draws grey hatched bars:
    for someone else's figures, which the title must then name. Returns the figure."""
    plt = _pyplot()
    if not values:
        raise ValueError("plot_ladder got no values to draw: check that something was measured "
                         "or recorded before plotting it.")
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 3.8))
    else:
        fig = ax.figure
    names = list(values)
    base = values.get(percent_of) if percent_of else None
    style = (dict(color="#d9d9d9", edgecolor="#636363", hatch="//") if published else
             dict(color=["#3182bd" if n.startswith("cuBLAS") else "#9ecae1" for n in names]))
    bars = ax.bar([n.replace(", ", "\n").replace(" ", "\n", 1) if len(n) > 12 else n
                   for n in names], [values[n] for n in names], **style)
    ax.bar_label(bars, fontsize=8, labels=[
        f"{values[n]:,.4g}" + (f"\n({values[n] / base:.0%})" if base else "") for n in names])
    ax.set(ylabel=unit, title=title)
    ax.tick_params(axis="x", labelsize=8)
    ax.margins(y=0.2)
    fig.tight_layout()
    return fig
