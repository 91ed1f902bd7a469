"""``dlcourse predict``, ``export`` and ``serve`` (notebook 12: from checkpoint to service): use
a saved model for classes and probabilities, an ONNX file, or an HTTP service with a page to
try it (export and serve need the ``[serve]`` extra)."""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

from .common import (PROG, CLIError, add_protection_options, check_output, number,
                     positive_int, tokenizer_beside)
from .train_data import DATASETS, load_data


def _shape(text):
    """--input-shape: "64" or "1,8,8" -> (64,) or (1, 8, 8)."""
    try:
        shape = tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected one sample's shape such as 64 or 1,8,8, "
                                         f"got {text!r}")
    return shape


_port = number(int, lambda v: 0 < v < 65536, "a port number from 1 to 65535")


def add_commands(commands) -> None:
    shape_help = ("one sample's shape, e.g. 64 or 1,8,8 (default: read from the model; needed "
                  "for a Sequential that starts with a Conv2d)")
    predict = commands.add_parser(
        "predict", help="print the classes and probabilities a saved model gives for inputs",
        description="Load MODEL.npz (written by `dlcourse train --save` or dl.save) and print, "
                    "for each input, its class and the class probabilities. INPUT is an .npy "
                    "(or .npz) of inputs shaped like the model's (a batch, flat or as images, "
                    "or one sample), or an image file for the image models (resized to the "
                    "model's input; ink bright, a light background is inverted).")
    predict.add_argument("model", metavar="MODEL.npz")
    predict.add_argument("input", metavar="INPUT", nargs="?",
                         help="inputs to classify; leave out with --samples")
    predict.add_argument("--samples", type=positive_int, metavar="N",
                         help="instead of INPUT: N test samples of the data set the model was "
                              "trained on (its checkpoint says which; the digits for a model "
                              "that takes 8x8 digits), shown with their true classes")
    predict.add_argument("--text", metavar="PROMPT",
                         help="instead of INPUT, for a language model: the text whose next "
                              "token (a character, or a BPE token with the tokenizer saved "
                              "beside the model) it predicts")
    predict.add_argument("--input-shape", type=_shape, metavar="SHAPE", help=shape_help)
    predict.add_argument("--top", type=positive_int, default=3,
                         help="probabilities shown per input, largest first (default: 3)")
    add_protection_options(predict)
    predict.set_defaults(run=_predict)

    export = commands.add_parser(
        "export", help="write a saved model as an ONNX file",
        description="Write MODEL.npz as OUT.onnx (evaluation mode, float32, dynamic batch "
                    "axis), check it with onnx.checker and compare onnxruntime's outputs with "
                    "dlcourse's on random inputs. Needs: pip install -e \".[serve]\".")
    export.add_argument("model", metavar="MODEL.npz")
    export.add_argument("out", metavar="OUT.onnx")
    export.add_argument("--input-shape", type=_shape, metavar="SHAPE", help=shape_help)
    export.add_argument("--force", action="store_true",
                        help="replace an existing OUT that is not an ONNX file")
    add_protection_options(export)
    export.set_defaults(run=_export)

    serve = commands.add_parser(
        "serve", help="serve a saved model over HTTP, with a page to try it",
        description="Serve MODEL.npz (or an .onnx file) on http://127.0.0.1:PORT/: GET / is a "
                    "page where you draw a digit (for a language model: a page that continues "
                    "your text), GET /health says the service is up, which "
                    "model and which engine it serves, POST /predict takes {\"inputs\": [[...], "
                    "...]} and returns {\"classes\": [...], \"probabilities\": [[...], ...]}. "
                    "The model runs on onnxruntime when it is installed: exported at start and "
                    "refused unless its logits match dl.infer's (to 1e-4 on 8 random inputs). "
                    "Requests that arrive within --batch-window-ms run as one batch. An .onnx "
                    "file is served by onnxruntime as it is, its input shape read from the "
                    "graph; of the checks only --expect-sha256 applies to it (no signature, "
                    "key or digest inside). Needs: pip install -e \".[serve]\".")
    serve.add_argument("model", metavar="MODEL",
                       help="a checkpoint (.npz, from dlcourse train --save or dl.save) or an "
                            "ONNX file (.onnx)")
    serve.add_argument("--engine", choices=("auto", "onnxruntime", "dlcourse"), default="auto",
                       help="what runs the model: onnxruntime (exported and checked at start), "
                            "dlcourse (dl.infer, the course's own), or auto: onnxruntime when "
                            "it is installed (default)")
    serve.add_argument("--batch-window-ms", type=number(float, lambda v: 0 <= v <= 1000,
                                                         "milliseconds from 0 to 1000"),
                       default=2.0, metavar="MS",
                       help="requests arriving within MS milliseconds run as one batch (at "
                            "most 1024 samples); 0 runs each on its own (default: 2)")
    serve.add_argument("--input-shape", type=_shape, metavar="SHAPE", help=shape_help)
    serve.add_argument("--port", type=_port, default=8000, help="default: 8000")
    serve.add_argument("--host", default="127.0.0.1",
                       help="default: 127.0.0.1, this machine only (0.0.0.0 opens it to the "
                            "network)")
    serve.add_argument("--expect-sha256", metavar="HEX",
                       help="refuse to start unless the model file's SHA-256 (as sha256sum "
                            "prints it) is HEX")
    serve.add_argument("--max-request-bytes", type=positive_int, default=4 * 2**20,
                       help="largest request body accepted (default: 4 MiB)")
    add_protection_options(serve)
    serve.set_defaults(run=_serve)


def _say_verified(args) -> None:
    """After a load with --public-key (which refuses any other file): say whose signature."""
    if args.public_key is not None:
        from ..protect import public_key_id, signature_path
        print(f"signature verified: key id {public_key_id(args.public_key)} "
              f"({signature_path(args.model).name})")


def _load_for_inference(args):
    from ..checkpoint import load
    from ..inference import InputError, check_parameters_finite, fits, input_shape
    model = load(args.model, key=args.key, public_key=args.public_key)
    _say_verified(args)
    try:
        check_parameters_finite(model, args.model)
        if not args.input_shape:
            return model, input_shape(model)
    except InputError as err:
        raise CLIError(str(err)) from None
    shape = tuple(args.input_shape)
    problem = fits(model, shape)
    if problem:
        raise CLIError(f"--input-shape {','.join(map(str, shape))} does not fit this model: "
                       f"{problem}")
    return model, shape


def _test_samples(model, shape, n: int):
    """(x, y): the first n test samples of the data set the model was trained on."""
    name = getattr(model, "dataset", None)
    if name is None and tuple(shape) in ((64,), (1, 8, 8)):
        name = "digits"                          # what a model of 8x8 inputs is trained on
    if name is None or name not in DATASETS or name == "text":
        raise CLIError("this checkpoint does not say which data set it was trained on (only "
                       "`dlcourse train --save` records it): give an INPUT file instead of "
                       "--samples, e.g. one written with np.save('inputs.npy', X[:5]).")
    flat = len(shape) == 1
    (_, _), (_, _), (X, y) = load_data(name, flat=flat, progress=False)
    return X[:n], y[:n], name


def _predict(args) -> int:
    from ..inference import InputError, as_batch, predict_proba, read_inputs, tokens_of
    if sum(given is not None for given in (args.input, args.samples, args.text)) != 1:
        raise CLIError("give either INPUT (a file of inputs), --samples N (N test samples of "
                       "the model's data set) or --text PROMPT (for a language model), one of "
                       "them: e.g. `dlcourse predict cnn.npz --samples 5`.")
    model, shape = _load_for_inference(args)
    try:
        tokens = tokens_of(model, shape)
    except InputError as err:
        raise CLIError(str(err)) from None
    if tokens is not None:
        return _predict_next(args, model, tokens)
    if args.text is not None:
        raise CLIError(f"--text is for a language model (the character transformer); "
                       f"{args.model} is a {type(model).__name__} that classifies inputs of "
                       f"shape {list(shape)}: give INPUT (an .npy) or --samples N.")
    truth, where = None, args.input
    try:
        if args.samples is not None:
            raw, truth, name = _test_samples(model, shape, args.samples)
            where = f"{name} test samples"
        else:
            raw = read_inputs(args.input, shape)
        x = as_batch(raw, shape, single_ok=True)
        classes, probs = predict_proba(model, x)
    except InputError as err:
        raise CLIError(f"{where}: {err}") from None
    top = min(args.top, probs.shape[1])
    print(f"{len(x)} input(s) of shape {list(shape)}{f' ({where})' if truth is not None else ''}"
          f": class, then the {top} largest probabilities")
    for i, (c, p) in enumerate(zip(classes, probs)):
        best = np.argsort(-p, kind="stable")[:top]
        known = f" (true {truth[i]})" if truth is not None else ""
        print(f"{i}: class {c}{known}   " + "  ".join(f"{k}: {p[k]:.4f}" for k in best))
    if truth is not None:
        print(f"{int((classes == truth).sum())} of {len(truth)} right")
    return 0


def _predict_next(args, model, tokens) -> int:
    """predict on a language model: the distribution of the next token after each prompt
    (--text, a .txt file, or an .npy of token ids (N, T) or (T,))."""
    from ..inference import InputError, next_token_logits, read_inputs, classes_and_probabilities
    from ..fast_inference import infer
    if args.samples is not None:
        raise CLIError(f"{args.model} is a language model: it has no labelled test samples to "
                       f"classify. Give a prompt, `{PROG} predict {args.model} --text \"The "
                       f"\"` (the next character's probabilities), or continue it with "
                       f"`{PROG} generate {args.model} --prompt \"The \"`.")
    bpe = None if tokens.chars else tokenizer_beside(args.model, model)   # --tokenizer bpe
    if bpe is not None:
        tokens = replace(tokens, tokenizer=bpe)         # then text prompts are encoded with it
    try:
        if args.text is not None:
            prompts = [args.text]
        elif Path(args.input).suffix.lower() == ".txt":
            prompts = [Path(args.input).read_text(encoding="utf-8")]
        else:
            prompts = read_inputs(args.input, (tokens.width,))
        rows = tokens.batch(prompts)
    except InputError as err:
        raise CLIError(f"{'--text' if args.text is not None else args.input}: {err}") from None
    logits = next_token_logits(infer(model, np.where(rows < 0, 0, rows)), rows)
    _, probs = classes_and_probabilities(logits)
    top = min(args.top, probs.shape[1])
    what = "characters" if tokens.chars else "BPE tokens" if bpe is not None else "token ids"
    print(f"{len(rows)} prompt(s) for a language model (vocabulary {tokens.vocab}, context "
          f"{tokens.width}): the {top} likeliest next {what}")
    for i, (row, p) in enumerate(zip(rows, probs)):
        ids = row[row >= 0]
        shown = repr(tokens.text(ids)) if tokens.reads_text() else str(ids.tolist())
        best = np.argsort(-p, kind="stable")[:top]
        names = map(repr, tokens.texts(best)) if tokens.reads_text() else map(str, best)
        print(f"{i}: {shown[-40:]} -> " + "  ".join(f"{n}: {p[k]:.4f}" for n, k in zip(names, best)))
    return 0


def _export(args) -> int:
    """Export, check against onnxruntime, and only then write OUT (atomically): a failed
    export or a mismatch leaves no file behind, and an existing OUT stays as it was."""
    from .._io import atomic_write
    from ..export import ExportError, require, to_onnx
    from ..inference import random_inputs
    out = check_output("OUT", args.out, inputs=[args.model], expect="onnx", force=args.force)
    if not out.parent.is_dir():
        raise CLIError(f"cannot write {out}: the folder {out.parent} does not exist.")
    model, shape = _load_for_inference(args)
    try:
        data = to_onnx(model, shape).SerializeToString()
        ort = require("onnxruntime")
    except (ExportError, ImportError) as err:
        raise CLIError(str(err)) from None
    x = random_inputs(model, shape, 8)      # token ids (int64) for a language model
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    onnx_out = session.run(None, {session.get_inputs()[0].name: x})[0]
    model.eval()
    diff = float(np.abs(onnx_out - np.asarray(model.forward(x))).max())
    if not diff <= 1e-4:
        raise CLIError(f"onnxruntime's outputs differ from dlcourse's by {diff:.2e} (more than "
                       f"1e-4) on the exported model: nothing was written.")
    with atomic_write(out) as f:
        f.write(data)
    kind = " int64 token ids" if x.dtype.kind == "i" else ""
    print(f"wrote {out}: input [N, {', '.join(map(str, shape))}]{kind}; onnxruntime matches "
          f"dlcourse to {diff:.1e} on 8 random inputs")
    return 0


def _serve(args) -> int:
    from ..serve import ModelRefused, serve
    try:
        serve(args.model, host=args.host, port=args.port, expect_sha256=args.expect_sha256,
              max_request_bytes=args.max_request_bytes, key=args.key,
              public_key=args.public_key, engine=args.engine,
              batch_window_ms=args.batch_window_ms, shape=args.input_shape)
    except (ModelRefused, ImportError) as err:
        raise CLIError(str(err)) from None
    return 0
