"""Interactive panels for JupyterLab, running the course's own code (notebooks ``04d_playground``
and ``07_training_a_cnn``).

* :func:`playground` -- a TensorFlow-Playground-like panel: pick a data set (blobs, XOR,
  circles, spirals, digits), a network and an optimizer, press Train, and watch the loss, the
  accuracy and (for 2-D data) the decision boundary change while :func:`dlcourse.train.fit`
  trains a :class:`dlcourse.MLP` -- on the GPU when one is usable, else on the CPU.
* :func:`cnn_explorer` -- a small CNN's first-layer filters, the feature maps it makes of a
  chosen image, and its prediction.

The panels need ``ipywidgets`` (in the ``[course]`` extra); ``import dlcourse`` does not import
it, and neither does importing this package: the widgets are made when a panel is.
The logic sits in plain functions (:func:`decision_grid`, :func:`feature_maps`, ...) that work
without any widget; the lesson's exercise checks are in :mod:`dlcourse.check` with the others.
"""
from .cnn_explorer import (CNNExplorer, cnn_explorer, conv_filters, feature_maps,
                           layer_outputs, train_digits_cnn)
from ._common import class_colors
from .playground import (DATASETS, Playground, PlaygroundData, build_model, count_parameters,
                         decision_grid, load_dataset, playground, probability_image)

__all__ = ["playground", "Playground", "cnn_explorer", "CNNExplorer", "DATASETS",
           "PlaygroundData", "load_dataset", "build_model", "count_parameters",
           "decision_grid", "probability_image", "class_colors", "train_digits_cnn", "conv_filters",
           "layer_outputs", "feature_maps"]
