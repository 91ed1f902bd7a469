"""``dlcourse serve``: a trained model behind an HTTP prediction service (FastAPI on uvicorn),
with a page where you draw a digit. Introduced in notebook ``12_checkpoint_to_service``.

Optional: ``python -m pip install -e ".[serve]"``. The service (:mod:`dlcourse.serve.app`)
runs the model on an engine (:mod:`dlcourse.serve.engines`: onnxruntime or ``dl.infer``) and
batches the requests that arrive together (:mod:`dlcourse.serve.batching`);
:mod:`dlcourse.serve.loadtest` measures it under load.
"""
from .app import (BATCH_WINDOW_MS, DEFAULT_HOST, DEFAULT_PORT, MAX_BATCH, MAX_REQUEST_BYTES,
                  ModelRefused, create_app, load_engine, load_verified, serve, sha256_of)
from .engines import ENGINES, Engine, EngineError

__all__ = ["BATCH_WINDOW_MS", "DEFAULT_HOST", "DEFAULT_PORT", "ENGINES", "MAX_BATCH",
           "MAX_REQUEST_BYTES", "Engine", "EngineError", "ModelRefused", "create_app",
           "load_engine", "load_verified", "serve", "sha256_of"]
