"""benchmarks/serve_load.py, loaded once for every test that starts a real service on loopback:
its model (``digits_model``) and the start, stop and load machinery it re-exports from
``dlcourse.serve.loadtest``."""
import functools
import importlib.util
from pathlib import Path


@functools.lru_cache(maxsize=None)
def serve_load():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "serve_load.py"
    spec = importlib.util.spec_from_file_location("serve_load", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
