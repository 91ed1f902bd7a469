"""What both panels share: the lazy ipywidgets import, one matplotlib figure rendered to PNG
bytes without pyplot, and the status line.

Why PNG bytes in an ``ipywidgets.Image``: it needs no extra JupyterLab extension (ipympl is not
a dependency), works with any matplotlib backend, in headless tests and from a background
thread, and it does not flicker: the figure is created once, its artists are updated, and
the Image widget's ``value`` is swapped for the new picture.
"""
from __future__ import annotations

import html
import io
import threading

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..backend import to_device

# Class colours: orange and blue as in TensorFlow Playground, then matplotlib's tab10.
CLASS_COLORS = np.array([
    [0.961, 0.576, 0.133],   # orange
    [0.031, 0.467, 0.741],   # blue
    [0.173, 0.627, 0.173],   # green
    [0.839, 0.153, 0.157],   # red
    [0.580, 0.404, 0.741],   # purple
    [0.549, 0.337, 0.294],   # brown
    [0.890, 0.467, 0.761],   # pink
    [0.498, 0.498, 0.498],   # grey
    [0.737, 0.741, 0.133],   # olive
    [0.090, 0.745, 0.812],   # cyan
])


def class_colors(K: int) -> np.ndarray:
    """(K, 3) RGB colours in [0, 1], one per class (cycling after 10)."""
    return CLASS_COLORS[np.arange(K) % len(CLASS_COLORS)]


def _float_dtype(model):
    """The model's float dtype (float32 when it does not say)."""
    dtype = getattr(model, "dtype", None)
    return np.float32 if dtype is None else dtype


def model_input(model, x):
    """x (a NumPy array) as the model takes it: in its float dtype, on its device."""
    return to_device(np.asarray(x).astype(_float_dtype(model)), getattr(model, "device", "cpu"))


class Panel:
    """What both panels show the same way. A subclass sets ``self.image`` (its ``Image``
    widget) and ``self.widget`` (the whole panel), and names itself in ``panel_name``."""
    panel_name = "panel"

    def snapshot(self):
        """The current plot as an ``IPython.display.Image`` (a static picture that stays in
        the saved notebook)."""
        from IPython.display import Image
        return Image(data=self.image.value, format="png")

    def _repr_mimebundle_(self, **kwargs):
        # The widget view, plus the text a saved notebook shows before the cell runs again.
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = (f"[dlcourse {self.panel_name} panel: it appears here when this "
                                f"cell runs in JupyterLab with ipywidgets]")
        return bundle


def ipywidgets():
    """The ``ipywidgets`` module, or an ImportError that says how to install it."""
    try:
        import ipywidgets as widgets
    except ImportError as err:   # pragma: no cover - ipywidgets is in the [course] extra
        raise ImportError(
            "The interactive panels need ipywidgets (and JupyterLab to show them). Install "
            "the course extras: python -m pip install -e \".[course]\"") from err
    return widgets


class FigurePNG:
    """A matplotlib Figure made once, without pyplot, rendered to PNG bytes on demand.

    ``pyplot`` keeps global state and is not safe to use from a background thread; a
    ``Figure`` with its own Agg canvas is an ordinary object. A lock makes sure two threads
    (the training thread and a widget callback) never draw it at the same time: hold
    ``with fp.lock:`` while changing artists, then call :meth:`png`.
    """

    def __init__(self, figsize, dpi: int = 80):
        self.fig = Figure(figsize=figsize, dpi=dpi)
        self.canvas = FigureCanvasAgg(self.fig)
        self.lock = threading.RLock()

    def png(self) -> bytes:
        with self.lock:
            buf = io.BytesIO()
            self.canvas.print_png(buf)
            return buf.getvalue()


def status_html(text: str, kind: str = "info", details: str | None = None) -> str:
    """The HTML of a status line: ``kind`` is ``"info"``, ``"ok"``, ``"warn"`` or ``"error"``
    (red). ``details`` (e.g. a traceback) goes into a folded ``<details>`` block."""
    color = {"info": "#333", "ok": "#1b5e20", "warn": "#8a5300", "error": "#b00020"}[kind]
    weight = "bold" if kind == "error" else "normal"
    body = (f'<div class="dlcourse-status-{kind}" style="color:{color};font-weight:{weight};'
            f'white-space:normal;line-height:1.35">{html.escape(text)}</div>')
    if details:
        body += (f'<details><summary style="color:{color}">details</summary>'
                 f'<pre style="font-size:11px;white-space:pre-wrap">{html.escape(details)}'
                 f'</pre></details>')
    return body
