"""The playground's network and optimizer, made from the panel's settings (notebook
``04d_playground``)."""
from __future__ import annotations

from .._validate import whole_number
from ..models import MLP
from ..optim import SGD, Adam

ACTIVATION_NAMES = ("relu", "tanh", "sigmoid")
OPTIMIZERS = ("SGD", "Adam")


def build_model(num_features: int, num_classes: int, hidden_layers: int = 1, units: int = 8,
                activation: str = "tanh", seed: int | None = 0) -> MLP:
    """The panel's network: ``MLP([D] + [units] * hidden_layers + [K])``.

    With ``hidden_layers=0`` it is a single Linear layer (softmax regression): its decision
    boundaries are straight lines.
    """
    hidden_layers = whole_number(hidden_layers, "build_model(hidden_layers=...)", minimum=0)
    units = whole_number(units, "build_model(units=...)")
    return MLP(mlp_sizes(num_features, num_classes, hidden_layers, units), activation=activation,
               seed=seed)


def mlp_sizes(num_features, num_classes, hidden_layers, units) -> list:
    return [int(num_features)] + [int(units)] * int(hidden_layers) + [int(num_classes)]


def count_parameters(sizes) -> int:
    """Weights and biases of an MLP with layer sizes ``[D, H1, ..., K]``."""
    return sum(d_in * d_out + d_out for d_in, d_out in zip(sizes[:-1], sizes[1:]))


def make_optimizer(name: str, model, lr: float):
    """``"SGD"`` (plain, no momentum, as in TensorFlow Playground) or ``"Adam"``."""
    if name == "SGD":
        return SGD(model, lr=lr)
    if name == "Adam":
        return Adam(model, lr=lr)
    raise ValueError(f"optimizer must be 'SGD' or 'Adam', got {name!r}.")
