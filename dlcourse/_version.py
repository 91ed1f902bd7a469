"""The version of dlcourse, in one place: the package (``dl.__version__``), checkpoints
(``checkpoint.py``), ONNX files (``export.py``) and the command line read it from here, so no
module imports the package itself for it. pyproject.toml's version agrees (a test holds it)."""

__version__ = "0.1.0"
