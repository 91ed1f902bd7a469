"""The prediction service: a checkpoint loaded once, verified, and served over HTTP.

Introduced in notebook ``12_checkpoint_to_service``. Started by ``dlcourse serve MODEL.npz``
(or ``MODEL.onnx``):

``GET /``            a page where you draw a digit and watch the probabilities (draw.html); for a
                     language model, a page that continues your text (prompt.html)
``GET /health``      ``{"status": "ok", "engine": "onnxruntime", "sha256": ..., "input_shape":
                     [...], "classes": K, "batch_window_ms": 2, ...}``
``POST /predict``    ``{"inputs": [[...], ...]}`` (a batch, shaped as the model's input, flat
                     or as images) -> ``{"classes": [...], "probabilities": [[...], ...]}``;
                     for a language model ``{"inputs": ["The ", [5, 7], ...]}`` (prompts as
                     text or token ids) -> each prompt's next token: its class (id), the
                     probabilities over the vocabulary and ``"next_characters"``

The model runs on onnxruntime when it is installed, exported at start and checked against
``dl.infer``, or on ``dl.infer`` itself (``engines.py``); requests that arrive within a few
milliseconds of each other run as one batch (``batching.py``).

What a service adds to ``model.forward``: it refuses what the model cannot take with a JSON
error that says what was expected (400: not JSON; 413: too large; 422: wrong shape, type or a
non-finite number or output; 503: the model failed on this request alone), never a traceback;
it limits the size of a request; it serves one model, checked before the first request (the
checkpoint's own SHA-256 by ``dl.load``, and, with ``expect_sha256``, the file's SHA-256
against the one you pinned: any other file is refused at start); and it answers ``/health``
for whoever watches it.

FastAPI (on uvicorn) is a maintained, widely used framework; it is imported only here, so the
core install does not need it (``pip install -e ".[serve]"``).
"""

import hashlib  # (no `from __future__ import annotations`: FastAPI reads the handlers' annotations)
import json
import sys
from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np

from ..checkpoint import load_bytes
from ..data.bpe import BPETokenizer
from ..inference import (InputError, as_batch, check_parameters_finite, fits, input_shape,
                         tokens_of)
from .batching import Batcher, run_rows
from .engines import (Engine, EngineError, dlcourse_engine, engine_for_checkpoint,
                      engine_for_onnx, language_engine)

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000
MAX_REQUEST_BYTES = 4 * 2**20     # 4 MiB of JSON: a batch of ~256 MNIST images
MAX_BATCH = 1024                  # samples in one request, and in one batched model call
BATCH_WINDOW_MS = 2.0             # how long a request waits for others to batch with (0: never)
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class ModelRefused(RuntimeError):
    """The model file is not the one the service was told to serve (``--expect-sha256``)."""


def sha256_of(path) -> str:
    """The SHA-256 of a file's bytes, as ``sha256sum`` prints it."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_pinned(path, expect_sha256: str | None = None) -> tuple[bytes, str]:
    """``(bytes, sha256)`` of the file at ``path``, read once; :class:`ModelRefused` when
    ``expect_sha256`` is given and is not its SHA-256."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"No model at {path}: give the .npz that `dlcourse train "
                                f"--save` or dl.save wrote (or an .onnx file).") from None
    digest = hashlib.sha256(data).hexdigest()
    if expect_sha256 is not None:
        want = expect_sha256.strip().lower()
        if len(want) != 64 or any(c not in "0123456789abcdef" for c in want):
            raise ModelRefused(f"--expect-sha256 must be 64 hexadecimal digits (sha256sum "
                               f"prints them), got {expect_sha256!r}.")
        if digest != want:
            raise ModelRefused(f"refusing to serve {path}: its SHA-256 is {digest}, not the "
                               f"expected {want}. The file was changed or replaced; serve "
                               f"the right file, or pin the new one after checking it.")
    return data, digest


def load_verified(path, expect_sha256: str | None = None, *, key=None, public_key=None):
    """``(model, sha256)``: the checkpoint at ``path``, loaded once from the very bytes that
    were hashed and verified (a file swapped between the check and the load cannot slip in),
    refused with :class:`ModelRefused` when ``expect_sha256`` is given and differs. With
    ``public_key`` its signature (``path + ".sig"``) must verify on those bytes; ``key``
    decrypts an encrypted checkpoint (``protect.py``). ``dl.load`` then checks the checkpoint's
    own digest (CheckpointError when altered)."""
    path = Path(path)
    data, digest = read_pinned(path, expect_sha256)
    from ..protect import ProtectionError
    try:
        model = load_bytes(path, data, key=key, public_key=public_key)
    except ProtectionError as err:
        raise ModelRefused(f"refusing to serve {path}: {err}") from None
    return model, digest


def page_html(language_model: bool = False) -> str:
    """The service's page (package data): draw a digit (dlcourse/serve/draw.html), or, for a
    language model, continue a text (dlcourse/serve/prompt.html)."""
    page = "prompt.html" if language_model else "draw.html"
    return resources.files(__package__).joinpath(page).read_text(encoding="utf-8")


def load_engine(path, expect_sha256: str | None = None, *, engine: str = "auto", key=None,
                public_key=None, shape=None) -> tuple[Engine, str]:
    """``(engine, sha256)``: the model at ``path`` ready to serve, or :class:`ModelRefused`
    saying why not, before any port is opened.

    A checkpoint (.npz) is loaded as :func:`load_verified` loads it, its parameters must be
    finite, and ``engine`` (auto, onnxruntime, dlcourse: ``engines.py``) runs it; onnxruntime
    only after its logits matched ``dl.infer``'s. An ``.onnx`` file runs on onnxruntime as it
    is, its input shape read from the graph; of the checks only ``expect_sha256`` applies to
    it. ``shape``: one sample's shape, for a checkpoint that does not say it (--input-shape).
    Either way the model must give finite outputs for an all-zero sample."""
    path = Path(path)
    try:
        if path.suffix.lower() == ".onnx":
            if engine == "dlcourse" or key or public_key or shape:
                given = ("--engine dlcourse" if engine == "dlcourse" else "--key" if key else
                         "--public-key" if public_key else "--input-shape")
                raise ModelRefused(f"refusing to serve {path}: an ONNX file is served by "
                                   f"onnxruntime as it is, and {given} applies to a dlcourse "
                                   f"checkpoint (.npz) only (an .onnx file takes "
                                   f"--expect-sha256).")
            data, digest = read_pinned(path, expect_sha256)
            served = engine_for_onnx(data, str(path))
        else:
            model, digest = load_verified(path, expect_sha256, key=key, public_key=public_key)
            check_parameters_finite(model, str(path))
            problem = fits(model, tuple(shape)) if shape else ""
            shape = tuple(shape) if shape else input_shape(model)
            if problem:
                raise ModelRefused(f"--input-shape {','.join(map(str, shape))} does not fit "
                                   f"{path}: {problem}")
            served = engine_for_checkpoint(model, shape, engine)
            if served.tokens is not None and not served.tokens.chars:     # --tokenizer bpe
                try:
                    tokenizer = BPETokenizer.beside(path, served.tokens.vocab)
                except ValueError as err:
                    raise ModelRefused(f"refusing to serve {path}: {err}") from None
                if tokenizer is not None:
                    served = replace(served, tokens=replace(served.tokens, tokenizer=tokenizer))
    except (InputError, EngineError) as err:
        raise ModelRefused(f"refusing to serve {path}: {err}") from None
    try:
        _, probs = served.predict(np.zeros((1,) + served.input_shape, np.float32))
    except Exception as err:             # the engine's own error (onnxruntime's, a layer's)
        raise ModelRefused(f"refusing to serve {path}: it cannot predict an all-zero sample "
                           f"of shape {list(served.input_shape)} on {served.name}: "
                           f"{type(err).__name__}: {' '.join(str(err).split())}") from None
    if not np.isfinite(probs).all():
        raise ModelRefused(f"refusing to serve {path}: on an all-zero sample its outputs are "
                           f"not finite numbers, so no prediction would work.")
    return served, digest


def allowed_hosts(host: str) -> set | None:
    """The names a request's ``Host:`` may give for a service bound to ``host``: loopback's
    names, and ``host`` itself. None (any) for a service bound to every interface, which its
    user opened to the network on purpose."""
    if host in ("0.0.0.0", "::"):
        return None
    return {"127.0.0.1", "localhost", "::1", host.strip("[]").lower()}


def _host_name(header: str) -> str:
    """The host of a ``Host:`` header without its port: "[::1]:8000" -> "::1"."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def create_app(model, *, sha256: str = "", name: str = "model",
               max_request_bytes: int = MAX_REQUEST_BYTES, max_batch: int = MAX_BATCH,
               hosts: set | None = None, batch_window_ms: float = BATCH_WINDOW_MS,
               signed_by: str | None = None):
    """The FastAPI application serving ``model`` (see the module docstring): an
    :class:`~dlcourse.serve.engines.Engine`, or a dlcourse model (then run by ``dl.infer``).
    ``hosts``: the names a request's ``Host:`` header may give (:func:`allowed_hosts`; None:
    any). A web page using DNS rebinding sends its own domain there, so requests for other
    names are refused (421): such a page cannot reach a service on this machine's loopback.
    ``batch_window_ms``: requests arriving within it run as one batch of at most
    ``max_batch`` samples (``batching.py``); 0 runs each request on its own. ``signed_by``: the
    key id whose signature was verified at start (``/health`` names it), None if unchecked."""
    try:
        from fastapi import FastAPI, Request
        from fastapi.concurrency import run_in_threadpool
        from fastapi.responses import HTMLResponse, JSONResponse
        from starlette.exceptions import HTTPException
    except ImportError:
        raise ImportError("the prediction service needs FastAPI and uvicorn: python -m pip "
                          "install -e \".[serve]\"") from None
    if isinstance(model, Engine):
        engine = model
    else:
        engine = dlcourse_engine(model, input_shape(model))
        tokens = tokens_of(model)
        engine = engine if tokens is None else language_engine(engine, tokens)
    shape, tokens = engine.input_shape, engine.tokens
    K = int(engine.predict(np.zeros((1,) + shape, np.float32))[1].shape[1])
    if tokens is not None:                       # a language model: prompts in
        expected = (f'{{"inputs": [...]}}: a list of at most {max_batch} prompts, '
                    f'{tokens.expected()}')
    else:
        expected = (f'{{"inputs": [...]}}: a list of at most {max_batch} samples, each shaped '
                    f'{list(shape)}' + (f" or flat ({int(np.prod(shape))} numbers)"
                                        if len(shape) > 1 else ""))
    info = {"status": "ok", "model": name, "sha256": sha256, "engine": engine.name,
            "input_shape": list(shape), "classes": K, "max_batch": max_batch,
            "max_request_bytes": max_request_bytes, "batch_window_ms": batch_window_ms,
            "signature": ({"verified": True, "key_id": signed_by} if signed_by else
                          {"verified": False})}
    if tokens is not None:
        info.update(input=("prompts: text or token ids" if tokens.reads_text() else
                           "prompts: token ids"),
                    vocabulary=tokens.chars or tokens.texts(range(tokens.vocab)))
    batcher = (Batcher(engine.predict, batch_window_ms / 1000, max_batch)
               if batch_window_ms > 0 else None)
    unbatched = {"model_calls": 0, "requests": 0}
    app = FastAPI(title="dlcourse prediction service", docs_url=None, redoc_url=None,
                  openapi_url=None)

    def error(status: int, message: str):
        return JSONResponse({"error": message, "expected": expected}, status_code=status)

    @app.middleware("http")
    async def only_our_host(request, call_next):
        given = request.headers.get("host", "")
        if hosts is not None and _host_name(given) not in hosts:
            return JSONResponse({"error": f"this service answers requests addressed to "
                                          f"{', '.join(sorted(hosts))} only, not Host: {given!r} "
                                          f"(a page elsewhere must not reach it through DNS "
                                          f"rebinding). Use http://127.0.0.1:PORT/."},
                                status_code=421)
        return await call_next(request)

    @app.exception_handler(HTTPException)        # 404 (no such page), 405 (GET /predict), ...
    async def http_error(request, exc):
        return JSONResponse({"error": str(exc.detail), "paths": ["GET /", "GET /health",
                                                                 "POST /predict"]},
                            status_code=exc.status_code)

    @app.exception_handler(Exception)            # a bug of ours: no traceback to the client
    async def unexpected(request, exc):
        print(f"dlcourse serve: {type(exc).__name__}: {exc}", file=sys.stderr)
        return JSONResponse({"error": "internal error (see the server's log)"}, status_code=500)

    @app.get("/", response_class=HTMLResponse)
    def page():
        return page_html(language_model=tokens is not None)

    @app.get("/health")
    def health():
        counts = unbatched if batcher is None else {"model_calls": batcher.model_calls,
                                                    "requests": batcher.requests}
        return {**info, "served": dict(counts)}      # requests that reached the model

    async def run_model(x):
        """This request's (classes, probs), or the exception the model raised on its rows."""
        if batcher is not None:
            return await batcher.submit(x)
        answers, calls = await run_in_threadpool(run_rows, engine.predict, [x])
        unbatched["model_calls"] += calls
        unbatched["requests"] += 1
        return answers[0]

    @app.post("/predict")
    async def predict(request: Request):
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > max_request_bytes):
            return error(413, f"the request body may be at most {max_request_bytes} bytes, "
                              f"this one declares {declared}: send smaller batches.")
        body = bytearray()
        async for chunk in request.stream():     # counted as it arrives (chunked uploads too)
            body += chunk
            if len(body) > max_request_bytes:
                return error(413, f"the request body may be at most {max_request_bytes} "
                                  f"bytes: send smaller batches.")
        try:
            payload = json.loads(body)
        except ValueError:                       # not JSON, not UTF-8
            return error(400, "the body is not valid JSON.")
        except RecursionError:
            return error(400, "the JSON is nested too deeply.")
        if not isinstance(payload, dict) or "inputs" not in payload:
            return error(422, "the JSON must be an object with the key \"inputs\".")
        inputs = payload["inputs"]
        if not isinstance(inputs, list):
            return error(422, f"\"inputs\" must be a list (a batch), got "
                              f"{type(inputs).__name__}.")
        if len(inputs) > max_batch:
            return error(413, f"a request may hold at most {max_batch} samples, this one has "
                              f"{len(inputs)}: split the batch.")
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                x = as_batch(inputs, shape) if tokens is None else tokens.batch(inputs)
        except (InputError, RecursionError) as err:
            return error(422, str(err) if isinstance(err, InputError) else "nested too deep.")
        answer = await run_model(x)
        if isinstance(answer, Exception):
            print(f"dlcourse serve: the model failed on a request of {len(x)} sample(s): "
                  f"{type(answer).__name__}: {answer}", file=sys.stderr)
            return error(503, f"the model could not compute this request's answer "
                              f"({type(answer).__name__}); the service is up and other "
                              f"requests are answered. Try again, or send a smaller batch.")
        classes, probs = answer
        bad = np.flatnonzero(~np.isfinite(probs).all(axis=1))
        if bad.size:
            return error(422, f"the model's outputs are not finite numbers for sample(s) "
                              f"{bad[:10].tolist()}: these inputs are so far from what it was "
                              f"trained on that its arithmetic overflows. Send values in the "
                              f"range of its training data.")
        answer = {"classes": classes.tolist(), "probabilities": np.round(probs, 6).tolist()}
        if tokens is not None and tokens.reads_text():
            answer["next_characters"] = tokens.texts(classes)
        return answer

    return app


def _listen(host: str, port: int):
    """A socket bound to (host, port) and listening, or ModelRefused saying why not, before
    anything says the service is up."""
    import socket
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on sockets that
    # say they are TCP, and with it on, a response's body waited ~40 ms for the headers' ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and host == "::":
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as err:
        sock.close()
        import errno
        if err.errno == errno.EADDRINUSE:
            raise ModelRefused(f"port {port} on {host} is already in use (another dlcourse "
                               f"serve, or another program): stop it, or choose another port "
                               f"with --port.") from None
        raise ModelRefused(f"cannot listen on {host} port {port}: {err.strerror}.") from None
    return sock


def check_host(host: str) -> str:
    if not host or not host.strip():
        raise ModelRefused("--host is empty: give an address to listen on, e.g. 127.0.0.1 "
                           "(this machine only, the default) or 0.0.0.0 (all interfaces).")
    return host.strip()


def serve(path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          expect_sha256: str | None = None, max_request_bytes: int = MAX_REQUEST_BYTES, *,
          key=None, public_key=None, engine: str = "auto",
          batch_window_ms: float = BATCH_WINDOW_MS, shape=None) -> None:
    """Load and verify the model and its engine (:func:`load_engine`), bind the port, then
    serve until Ctrl-C (``dlcourse serve``)."""
    try:
        import uvicorn
    except ImportError:
        raise ImportError("the prediction service needs FastAPI and uvicorn: python -m pip "
                          "install -e \".[serve]\"") from None
    host = check_host(host)
    served, digest = load_engine(path, expect_sha256, engine=engine, key=key,
                                 public_key=public_key, shape=shape)
    signed_by = None
    if public_key is not None:           # verified by load_engine, or it would have refused
        from ..protect import public_key_id, signature_path
        signed_by = public_key_id(public_key)
    app = create_app(served, sha256=digest, name=Path(path).name,
                     max_request_bytes=max_request_bytes, hosts=allowed_hosts(host),
                     batch_window_ms=batch_window_ms, signed_by=signed_by)
    sock = _listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    print(f"dlcourse serve: {path} (sha256 {digest}), input {list(served.input_shape)}",
          flush=True)
    if signed_by is not None:
        print(f"dlcourse serve: signature verified: key id {signed_by} "
              f"({signature_path(path).name})", flush=True)
    print(f"dlcourse serve: engine {served.name} ({served.note}); " +
          (f"requests arriving within {batch_window_ms:g} ms run as one batch (at most "
           f"{MAX_BATCH} samples)" if batch_window_ms > 0 else "no batching across requests"),
          flush=True)
    if host not in LOOPBACK:
        where = ("all interfaces (0.0.0.0 and ::)" if host in ("0.0.0.0", "::") else host)
        print(f"dlcourse serve: warning: listening on {where}, so other machines can reach this "
              f"service; the default, 127.0.0.1, keeps it to this machine.", flush=True)
    if served.tokens is not None:        # a language model: no digit to draw
        print(f"dlcourse serve: POST prompts to http://{shown}:{port}/predict, e.g. "
              f"{{\"inputs\": [\"The \"]}} (Ctrl-C to stop)", flush=True)
    else:
        print(f"dlcourse serve: draw a digit at http://{shown}:{port}/ (Ctrl-C to stop)",
              flush=True)
    config = uvicorn.Config(app, log_level="warning", h11_max_incomplete_event_size=64 * 1024)
    uvicorn.Server(config).run(sockets=[sock])
