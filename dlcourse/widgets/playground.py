"""The playground: a TensorFlow-Playground-like panel that trains *our* MLP, live.

Introduced in notebook ``04d_playground``; used from ``04b_optimizers_and_regularization``
and ``07_training_a_cnn``.

Everything the panel shows is computed by the course's own code: :class:`dlcourse.MLP`,
:func:`dlcourse.train.fit` with its ``callback`` / ``on_step`` hooks, on the GPU when one is
usable and on the CPU otherwise. The widgets are a thin layer over plain functions:

* :func:`load_dataset` -- the five data sets, split into train and validation;
* :func:`build_model` -- an ``MLP`` from the panel's settings;
* :func:`decision_grid` -- the model's class probabilities on a grid over the plane, i.e.
  the coloured background of the decision-boundary plot;
* :func:`probability_image` -- those probabilities as an RGB picture.

They live beside this module: the data sets in ``playground_data.py``, the network in
``playground_model.py``, the decision boundary in ``decision_boundary.py``, the drawing in
``playground_figure.py``; this module holds the panel's controls and its training run.

How the panel stays responsive: **Train** starts :func:`fit` in a background thread and
returns at once, so JupyterLab keeps delivering widget messages (the **Stop** click) to the
kernel. ``on_step`` checks a stop flag after every step and redraws at most every
``redraw_interval`` seconds. The plot is one matplotlib ``Figure`` (no pyplot) whose artists
are updated and rendered to PNG bytes, swapped into an ``ipywidgets.Image``. For tests and
notebooks, ``train(blocking=True)`` runs the same code in the caller's thread.

The picture never runs the model being trained from another thread: a forward pass from the
interface thread (a redraw, a click) between the training step's forward and backward would
overwrite the caches backward needs. The panel draws from ``shown_model``, a second MLP of
the same architecture that only the training thread updates, between steps, under the
figure's lock (the lock every drawing takes).
"""
from __future__ import annotations

import math
import numbers
import threading
import time
import traceback

from ..backend import describe_device, get_device
from ..losses import SoftmaxCrossEntropy
from ..train import StopTraining, TrainingDiverged, fit
from ._common import FigurePNG, Panel, ipywidgets, status_html
from .decision_boundary import decision_grid, probability_image
from .playground_data import DATASET_LABELS, DATASETS, PlaygroundData, load_dataset
from .playground_figure import PlaygroundFigure
from .playground_model import (ACTIVATION_NAMES, OPTIMIZERS, build_model, count_parameters,
                               make_optimizer, mlp_sizes)

__all__ = ["DATASETS", "PlaygroundData", "load_dataset", "build_model", "decision_grid",
           "probability_image", "Playground", "playground"]

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# What each control can be set to: the controls are built from these, and a setting outside
# them is refused (a slider would silently clamp it)
_CHOICES = {"dataset": DATASETS, "activation": ACTIVATION_NAMES, "optimizer": OPTIMIZERS,
            "batch_size": BATCH_SIZES}
_RANGES = {"hidden_layers": (0, 6), "units": (1, 64), "epochs": (1, 500), "seed": (0, 99999),
           "lr": (1e-4, 1e3)}


def _check_setting(name, value):
    """A clear error for a playground setting its control cannot show."""
    if name in _CHOICES and value not in _CHOICES[name]:
        raise ValueError(f"playground {name} must be one of {list(_CHOICES[name])}, got {value!r}.")
    if name in _RANGES:
        lo, hi = _RANGES[name]
        whole = name != "lr"          # an integer slider would silently round 4.5 down to 4
        if (isinstance(value, bool) or not isinstance(value, numbers.Real)
                or not lo <= value <= hi or (whole and value != int(value))):
            raise ValueError(f"playground {name} must be a {'whole ' if whole else ''}number "
                             f"from {lo:g} to {hi:g} (the range of its slider), got {value!r}.")

# The panel calls a run "diverged" when an epoch's mean loss exceeds this many times the
# loss of guessing uniformly at random, ln K. (dl.fit itself stops on inf/NaN only; with a
# stable softmax the loss of a too-large step often stays finite but huge.)
DIVERGENCE_FACTOR = 3.0


class Playground(PlaygroundFigure, Panel):
    """The interactive panel: controls on the left, the live plot on the right.

    Drive it from code exactly as a learner does with the mouse::

        panel = Playground(dataset="xor", hidden_layers=1)
        panel.set(units=8, lr=0.03)          # or panel.controls["units"].value = 8
        history = panel.train(blocking=True) # or panel.train_button.click()
        panel.history.train_loss             # per-epoch losses, as dl.fit returns them

    Attributes worth knowing: ``controls`` (name -> widget), ``train_button``, ``image``
    (the plot, PNG bytes in ``image.value``), ``status`` (HTML), ``model``, ``history``,
    ``error`` (the exception of the last run, or None), ``widget`` (the whole panel).
    ``blocking`` (default False): whether a click on Train trains in the clicking thread.
    """

    panel_name = "playground"

    redraw_interval = 0.2     # seconds between live redraws while training
    resolution = 60           # decision-grid resolution while training (twice that at the end)

    def __init__(self, dataset: str = "xor", hidden_layers: int = 1, units: int = 4,
                 activation: str = "tanh", lr: float = 0.03, batch_size: int = 16,
                 optimizer: str = "Adam", epochs: int = 100, seed: int = 0,
                 blocking: bool = False):
        for name, value in dict(dataset=dataset, hidden_layers=hidden_layers, units=units,
                                activation=activation, lr=lr, batch_size=batch_size,
                                optimizer=optimizer, epochs=epochs, seed=seed).items():
            _check_setting(name, value)
        W = ipywidgets()
        self.blocking = bool(blocking)
        self.model = None
        self.shown_model = None   # what the picture is drawn from (see the module docstring)
        self.history = None
        self.error = None
        self.running = False
        self._stop = threading.Event()
        self._thread = None
        self._last_draw = 0.0
        self._run_info = {}

        style = {"description_width": "92px"}
        row = W.Layout(width="310px")
        span = {name: dict(min=lo, max=hi) for name, (lo, hi) in _RANGES.items()}
        lr_lo, lr_hi = _RANGES["lr"]                 # the lr slider moves in powers of 10
        self.controls = {
            "dataset": W.Dropdown(options=[(DATASET_LABELS[d], d) for d in DATASETS],
                                  value=dataset, description="dataset", style=style, layout=row),
            "hidden_layers": W.IntSlider(value=hidden_layers, **span["hidden_layers"],
                                         description="hidden layers", continuous_update=False,
                                         style=style, layout=row),
            "units": W.IntSlider(value=units, **span["units"], description="units / layer",
                                 continuous_update=False, style=style, layout=row),
            "activation": W.ToggleButtons(options=ACTIVATION_NAMES, value=activation,
                                          description="activation", layout=row,
                                          style={**style, "button_width": "76px"}),
            "optimizer": W.ToggleButtons(options=OPTIMIZERS, value=optimizer,
                                         description="optimizer", layout=row,
                                         style={**style, "button_width": "76px"}),
            "lr": W.FloatLogSlider(value=lr, base=10, min=math.log10(lr_lo),
                                   max=math.log10(lr_hi), step=0.1,
                                   description="learning rate", readout_format=".3g",
                                   continuous_update=False, style=style, layout=row),
            "batch_size": W.SelectionSlider(options=BATCH_SIZES, value=batch_size,
                                            description="batch size", continuous_update=False,
                                            style=style, layout=row),
            "epochs": W.IntSlider(value=epochs, **span["epochs"], description="epochs",
                                  continuous_update=False, style=style, layout=row),
            "seed": W.BoundedIntText(value=seed, **span["seed"], description="seed",
                                     style=style, layout=W.Layout(width="200px")),
        }
        self.train_button = W.Button(description="Train", button_style="success", icon="play",
                                     tooltip="Build a new network from these settings and "
                                             "train it (click again to stop)",
                                     layout=W.Layout(width="150px"))
        self.train_button.add_class("dlcourse-train")
        self.train_button.on_click(self._on_button)
        self.device_label = W.HTML(
            f'<span style="font-size:12px"><b>device</b>: {describe_device()}</span>',
            layout=W.Layout(width="310px"))
        self.architecture = W.HTML(layout=W.Layout(width="310px"))
        self.status = W.HTML(layout=W.Layout(width="100%"))
        self.status.add_class("dlcourse-status")
        self.image = W.Image(format="png", layout=W.Layout(width="100%", max_width="672px"))
        self.image.add_class("dlcourse-playground-plot")

        for name, control in self.controls.items():
            if name == "dataset":
                control.observe(self._on_dataset, names="value")
            else:
                control.observe(self._on_setting, names="value")

        left = W.VBox([W.HTML("<b>data</b>"), self.controls["dataset"],
                       W.HTML("<b>network</b>"), self.controls["hidden_layers"],
                       self.controls["units"], self.controls["activation"],
                       self.architecture,
                       W.HTML("<b>training</b>"), self.controls["optimizer"],
                       self.controls["lr"], self.controls["batch_size"],
                       self.controls["epochs"], self.controls["seed"],
                       self.train_button, self.device_label],
                      layout=W.Layout(width="330px", flex="0 0 330px"))
        right = W.VBox([self.image, self.status],
                       layout=W.Layout(flex="1 1 auto", min_width="360px"))
        self.widget = W.HBox([left, right], layout=W.Layout(width="100%"))
        self.widget.add_class("dlcourse-playground")

        self._figure = FigurePNG(figsize=(8.4, 3.7), dpi=80)
        self._build_figure()
        self._on_dataset(None)

    # -- settings -----------------------------------------------------------------------
    def config(self) -> dict:
        """The current settings: control name -> value."""
        return {name: control.value for name, control in self.controls.items()}

    def set(self, **settings) -> "Playground":
        """Set controls by name, e.g. ``panel.set(dataset="spirals", units=16)``."""
        if self.running:
            raise RuntimeError("The playground is training: stop it first (panel.stop(), then "
                               "panel.wait()) before changing its settings.")
        unknown = sorted(set(settings) - set(self.controls))
        if unknown:
            raise KeyError(f"Playground has no control named {unknown[0]!r}; the controls "
                           f"are {', '.join(self.controls)}.")
        for name, value in settings.items():
            _check_setting(name, value)
        for name, value in settings.items():
            self.controls[name].value = value
        return self

    def _on_dataset(self, change):
        if change is None:          # the first call, from __init__: let errors raise
            return self._show_dataset()
        try:                        # a widget callback: errors would vanish into a log
            self._show_dataset()
        except Exception as err:
            self.error = err
            self.status.value = status_html(f"Could not show this data set: "
                                            f"{type(err).__name__}: {err}", "error",
                                            traceback.format_exc())

    def _show_dataset(self):
        self.data = load_dataset(self.controls["dataset"].value)
        self.model = self.shown_model = None
        self.history = None
        self.error = None
        with self._figure.lock:
            self._setup_data_axes()
            self._reset_curves(self.controls["epochs"].value)
        self._update_architecture()
        d = self.data
        self.status.value = status_html(
            f"{DATASET_LABELS[d.name]}: {len(d.X_train)} training and {len(d.X_val)} "
            f"validation samples, {d.num_classes} classes. Choose a network and press Train.")
        self.redraw()

    def _on_setting(self, change):
        self._update_architecture()

    def _update_architecture(self):
        c, d = self.config(), self.data
        sizes = mlp_sizes(d.num_features, d.num_classes, c["hidden_layers"], c["units"])
        act = f" ({c['activation']})" if c["hidden_layers"] else " (no hidden layer: linear)"
        self.architecture.value = (
            f'<span style="font-size:12px">network: {" → ".join(map(str, sizes))}{act}, '
            f'{count_parameters(sizes)} parameters</span>')

    # -- training -----------------------------------------------------------------------
    def build_model(self, config: dict | None = None):
        """A fresh MLP from the settings (default: the current ones), on the default device."""
        c, d = config or self.config(), self.data
        model = build_model(d.num_features, d.num_classes, c["hidden_layers"], c["units"],
                            c["activation"], seed=c["seed"])
        return model.to(get_device())

    def train(self, blocking: bool | None = None):
        """Build a new model from the settings and train it with :func:`dlcourse.train.fit`.

        ``blocking=True`` trains in the calling thread and returns the :class:`History`;
        otherwise (the default, what the Train button does) training runs in a background
        thread and this returns None at once -- :meth:`wait` waits for it.
        Errors never escape: they are shown in the status line and kept in ``self.error``.
        """
        if self.running:
            self.status.value = status_html("Already training: press Stop first.", "warn")
            return None
        blocking = self.blocking if blocking is None else blocking
        config = self.config()
        self._stop.clear()
        self.error = None
        self._set_running(True)
        self.status.value = status_html("Starting…")
        if blocking:
            self._run(config)
            return self.history
        self._thread = threading.Thread(target=self._run, args=(config,),
                                        name="dlcourse-playground", daemon=True)
        self._thread.start()
        return None

    def stop(self) -> None:
        """Ask the running training to stop after its current step."""
        self._stop.set()

    def wait(self, timeout: float | None = None):
        """Wait for a background training run to finish; returns the history."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.history

    def _on_button(self, button):
        if self.running:
            self.stop()
        else:
            self.train()

    def _set_running(self, running: bool):
        self.running = running
        b = self.train_button
        b.description, b.icon = ("Stop", "stop") if running else ("Train", "play")
        b.button_style = "danger" if running else "success"
        for control in self.controls.values():
            control.disabled = running

    def _run(self, config):
        d = self.data
        start = time.perf_counter()
        self.history = None
        try:
            shown = self.build_model(config)
            model = self.model = self.build_model(config)
            with self._figure.lock:
                self.shown_model = shown          # drawn from: a copy, never the live model
            optimizer = make_optimizer(config["optimizer"], model, config["lr"])
            steps = -(-len(d.X_train) // config["batch_size"])
            self._run_info = {"epochs": config["epochs"], "steps_per_epoch": steps,
                              "lr": config["lr"], "epoch": 1, "device": model.device}
            with self._figure.lock:
                self._reset_curves(config["epochs"])
            self._last_draw = 0.0
            history = fit(model, SoftmaxCrossEntropy(), optimizer, d.X_train, d.y_train,
                          epochs=config["epochs"], batch_size=config["batch_size"],
                          validation=(d.X_val, d.y_val), seed=config["seed"], progress=False,
                          callback=self._on_epoch, on_step=self._on_step)
            self.history = history
            self._finished(history, time.perf_counter() - start)
        except TrainingDiverged as err:
            self.history, self.error = err.history, err
            self.status.value = status_html(str(err), "error")
        except Exception as err:     # shown in words, never lost in a thread or a callback
            self.error = err
            self.status.value = status_html(f"Training failed: {type(err).__name__}: {err}",
                                            "error", traceback.format_exc())
        finally:
            try:                     # before the button says Train again: no second run yet
                self._show_trained()
                self.redraw()
            except Exception as err:
                self.status.value += status_html(
                    f"Could not draw the result: {type(err).__name__}: {err}", "error",
                    traceback.format_exc())
            self._set_running(False)

    def _finished(self, history, seconds):
        if not history.epochs:
            self.status.value = status_html("Stopped before the first epoch ended.", "info")
            return
        where = "GPU" if self._run_info.get("device") == "gpu" else "CPU"
        text = (f"{history.epochs} epoch{'s' if history.epochs != 1 else ''} in {seconds:.1f} s "
                f"on the {where}: loss {history.train_loss[0]:.3f} → "
                f"{history.train_loss[-1]:.3f}, accuracy {history.train_accuracy[-1]:.2f} "
                f"(train), {history.val_accuracy[-1]:.2f} (validation).")
        if history.stop_reason == "callback":
            self.status.value = status_html("Stopped: " + text, "info")
        elif history.train_loss[-1] > 0.9 * math.log(self.data.num_classes):
            self.status.value = status_html(
                text + " The loss is no better than guessing: the network has not learned. "
                "Try more epochs, another learning rate, or a bigger network.", "warn")
        else:
            self.status.value = status_html("Done: " + text, "ok")

    def _show_trained(self):
        """Copy the trained weights into the model the picture is drawn from. Called by the
        training thread between steps (the live model is not mid-step then)."""
        model, shown = self.model, self.shown_model
        if model is None or shown is None or shown is model:
            return
        with self._figure.lock:
            shown.load_state_dict(model.state_dict())

    def _on_step(self, step, loss):
        if self._stop.is_set():
            raise StopTraining
        self._run_info["epoch"] = (step - 1) // self._run_info["steps_per_epoch"] + 1
        self._run_info["step_loss"] = loss
        if time.perf_counter() - self._last_draw >= self.redraw_interval:
            self._show_trained()
            self.redraw(live=True)

    def _on_epoch(self, epoch, history):
        self.history = history
        chance = math.log(self.data.num_classes)
        loss = history.train_loss[-1]
        if loss > DIVERGENCE_FACTOR * chance:
            lr = self._run_info["lr"]
            history.stop_reason = "diverged"
            raise TrainingDiverged(
                f"Training diverged at epoch {epoch}: the loss is {loss:.3g}, more than "
                f"{DIVERGENCE_FACTOR:g} times {chance:.3f}, the loss of guessing at random "
                f"(ln {self.data.num_classes}). The learning rate lr={lr:.3g} is probably too "
                f"large: each step overshoots the minimum. Try lr={lr / 10:.3g}.",
                history, epoch, self._run_info["steps_per_epoch"], lr)
        if self._stop.is_set():
            raise StopTraining

    # -- drawing (the figure's artists: PlaygroundFigure) -------------------------------
    def redraw(self, live: bool = False) -> bytes:
        """Update the plot from the current model and history; returns the PNG bytes (also
        put into ``self.image.value``). ``live=True`` (from the training loop): a coarser
        decision grid, and the status line shows the progress."""
        with self._figure.lock:
            self._draw_model(self.resolution if live else 2 * self.resolution)
            self._draw_curves()
            png = self._figure.png()
        self.image.value = png
        self._last_draw = time.perf_counter()
        if live:
            info = self._run_info
            text = f"Training on the {'GPU' if info.get('device') == 'gpu' else 'CPU'}… " \
                   f"epoch {info.get('epoch', 1)}/{info.get('epochs', '?')}"
            if "step_loss" in info:
                text += f", loss of the last batch {info['step_loss']:.4f}"
            if self.history is not None and self.history.val_accuracy:
                text += f", validation accuracy {self.history.val_accuracy[-1]:.2f}"
            self.status.value = status_html(text + ". Click Stop to stop.")
        return png

    # -- display ------------------------------------------------------------------------
    def __repr__(self) -> str:
        c = self.config()
        return (f"Playground(dataset={c['dataset']!r}, hidden_layers={c['hidden_layers']}, "
                f"units={c['units']}, activation={c['activation']!r}, lr={c['lr']:.3g}, "
                f"optimizer={c['optimizer']!r}, epochs={c['epochs']}, history={self.history!r})")


def playground(**settings) -> Playground:
    """Make the playground panel. It shows itself when it is the last line of a cell::

        dl.widgets.playground(dataset="spirals", hidden_layers=2, units=16)

    Keyword arguments set the initial controls (see :class:`Playground`).
    """
    return Playground(**settings)
