"""``dlcourse serve``: a trained model behind an HTTP prediction service (FastAPI on uvicorn),
with a page where you draw a digit. Introduced in notebook ``12_checkpoint_to_service``.

Optional: ``python -m pip install -e ".[serve]"``. See :mod:`dlcourse.serve.app`.
"""
from .app import (DEFAULT_HOST, DEFAULT_PORT, MAX_BATCH, MAX_REQUEST_BYTES, ModelRefused,
                  create_app, load_verified, serve, sha256_of)

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "MAX_BATCH", "MAX_REQUEST_BYTES", "ModelRefused",
           "create_app", "load_verified", "serve", "sha256_of"]
