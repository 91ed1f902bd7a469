"""Checks for lessons 12 (from checkpoint to service) and 12b (protecting a model).

==========================  ===============================================================
check                       your function
==========================  ===============================================================
:func:`fold_batchnorm`      ``(W, b, gamma, beta, mean, var, eps) -> (W_folded, b_folded)``
:func:`validate_batch`      ``(inputs, shape) -> float32 array (N, *shape)``, or ValueError
:func:`load_signed`         ``(path, public_key_file) -> model``, or an error (12b)
:func:`two_time_pad`        ``(c1, c2, cribs) -> (p1, p2)`` (lists, None unknown; 12b)
==========================  ===============================================================

Each check runs your function on several cases and prints one line when all pass, or raises
``ExerciseError`` saying which case failed, what was expected and the likely mistake (the
shared machinery is ``harness.py``).
"""
from __future__ import annotations

import os

import numpy as np

from ..inference import InputError, as_batch
from .harness import (ExerciseError, call, closed, expect_close, expect_shape, expect_tuple,
                      expect_unchanged, fail, handed, passed, to_array)

__all__ = ["fold_batchnorm", "validate_batch", "load_signed", "two_time_pad", "ExerciseError"]

# What load_signed may use: the signature library (cryptography's Ed25519) and the tool lesson
# 12b hands over to build a model from bytes already read.
_SIGNED_OPENS = ["cryptography", "dlcourse.checkpoint.load_bytes"]

# While the learner's function runs, the library's own versions answer with an error: the
# folding of dl.infer, this check's oracle, and BatchNorm2d's forward pass (which, run on the
# bias, would give the folded bias without any algebra).


def _fold_reference(W, b, gamma, beta, mean, var, eps):
    """The oracle: (W_folded, b_folded) of conv then evaluation-mode BatchNorm."""
    __tracebackhide__ = True
    s = gamma / np.sqrt(var + eps)
    return W * s.reshape(-1, 1, 1, 1), s * (b - mean) + beta


def fold_batchnorm(fn) -> None:
    """Check ``fn(W, b, gamma, beta, mean, var, eps)``: the Conv2d weights W (F, C, KH, KW) and
    bias b (F,) of a convolution followed by BatchNorm2d in evaluation mode (running mean and
    variance, gamma, beta, all (F,)), folded into ONE convolution ``(W_folded, b_folded)`` that
    gives the same output. The inputs must be left as they were."""
    __tracebackhide__ = True
    gen = np.random.default_rng(0)
    cases = [(2, 1, 1, 1e-5), (4, 3, 3, 1e-5), (3, 3, 1, 0.1), (5, 2, 3, 1e-3), (3, 4, 2, 0.5)]
    for F, C, K, eps in cases:                                           # F, C, K, eps
        case = f"W of shape ({F}, {C}, {K}, {K}), eps={eps}"
        W = gen.standard_normal((F, C, K, K))
        b, gamma, beta, mean = (gen.standard_normal(F) for _ in range(4))
        var = gen.uniform(0.05, 2.0, F)
        given = [a.copy() for a in (W, b, gamma, beta, mean, var)]
        got = call(fn, *given, eps, case=case)
        expect_unchanged(fn, case, list(zip(("W", "b", "gamma", "beta", "mean", "var"),
                                            (W, b, gamma, beta, mean, var), given)))
        W_got, b_got = expect_tuple(got, 2, fn, case, "(W_folded, b_folded)")
        W_got = to_array(W_got, fn, case, "W_folded")
        b_got = to_array(b_got, fn, case, "b_folded")
        W_want, b_want = _fold_reference(W, b, gamma, beta, mean, var, eps)
        s = gamma / np.sqrt(var + eps)

        def scaled(factor, axis=0):
            __tracebackhide__ = True
            shape = [1, 1, 1, 1]
            shape[axis] = -1
            return W * factor.reshape(shape)
        expect_shape(W_got, W.shape, fn, case, "W_folded", "W_folded has W's shape (F, C, KH, "
                     "KW): the (F,) factors must broadcast along axis 0 only (give them three "
                     "more axes of size 1).")
        expect_close(W_got, W_want, fn, case, "W_folded", mistakes=[
            (lambda: scaled(gamma / np.sqrt(var + 1e-5)) if eps != 1e-5 else None,
             f"use the eps you are given (here {eps}), not a fixed 1e-5."),
            (lambda: scaled(gamma / np.sqrt(var)),
             "BatchNorm divides by the standard deviation WITH eps under the square root."),
            (lambda: scaled(gamma / (var + eps)),
             "divide by the standard deviation (the square root), not by the variance."),
            (lambda: scaled(s[:C], axis=1) if F == C else None,
             "the factor has one value per OUTPUT channel (axis 0 of W), not per input channel."),
            (lambda: W * s.reshape(-1, 1, 1, 1) + (beta - mean * s).reshape(-1, 1, 1, 1),
             "the shift of BatchNorm (beta, the mean) belongs in the bias only: the weights are "
             "just scaled."),
        ], fix="write BatchNorm of the convolution's output z as (factor) * z + (shift) per "
               "channel; each output channel's filter W[f] is multiplied by its own factor.")
        expect_shape(b_got, b.shape, fn, case, "b_folded")
        expect_close(b_got, b_want, fn, case, "b_folded", mistakes=[
            (lambda: b * s + beta, "the running mean is subtracted from the convolution's "
                                   "output before it is scaled: the old bias is part of that."),
            (lambda: (b - mean) * s, "beta is added after scaling: it is missing."),
            (lambda: b - mean * s + beta, "the old bias is scaled too, not only the mean: "
                                          "BatchNorm scales the whole convolution output."),
            (lambda: (b - mean) * s + beta * s, "beta is added AFTER the scaling, so it is not "
                                                "multiplied by the factor."),
            (lambda: (b - mean) * gamma / np.sqrt(var + 1e-5) + beta if eps != 1e-5 else None,
             f"use the eps you are given (here {eps}), not a fixed 1e-5."),
        ], fix="substitute z = W * x + b into BatchNorm's formula and collect what does not "
               "multiply x: that is the folded bias.")
    passed(fn, len(cases))


def validate_batch(fn) -> None:
    """Check ``fn(inputs, shape)``: ``inputs`` is what a client sent (nested lists, as JSON
    gives them), ``shape`` one sample's shape. It returns a float32 array (N, *shape), taking
    samples as they are or flat (N, prod(shape)); anything else raises ValueError: not numbers
    (strings, booleans), ragged rows, an empty batch, a wrong shape, NaN or infinity."""
    __tracebackhide__ = True
    good = [([[0.0, 1.0, 2.0]], (3,), "one sample of 3"),
            ([[1, 2, 3], [4, 5, 6]], (3,), "two samples of 3 whole numbers"),
            ([[[[0.5] * 2] * 2]], (1, 2, 2), "one 1x2x2 image"),
            ([[0.0, 0.25, 0.5, 0.75]] * 3, (1, 2, 2), "three flat 1x2x2 images"),
            ([[1.5, -2.0], [0.0, 4.0]], (2,), "two samples of 2"),
            ([[0.0] * 6, [1.0] * 6], [2, 3], "two flat 2x3 samples, shape given as a list")]
    bad = [([], (3,), "an empty batch"),
           ([0.0, 1.0, 2.0], (3,), "one sample without its batch (a 1-D list)"),
           ([[0.0, 1.0]], (3,), "samples of 2 numbers for a model of 3"),
           ([[0.0, 1.0, 2.0], [0.0]], (3,), "ragged rows"),
           ([["0", "1", "2"]], (3,), "strings"),
           ([[True, False, True]], (3,), "booleans"),
           ([[0.0, float("nan"), 1.0]], (3,), "a NaN"),
           ([[0.0, float("inf"), 1.0]], (3,), "an infinity"),
           ([[0.0] * 5], (1, 2, 2), "5 numbers for a 1x2x2 image"),
           ([[0.0, 1.0, 2.0]], (2,), "samples of 3 numbers for a model of 2")]
    for inputs, shape, what in good:
        case = f"{what}: inputs={inputs}, shape={shape}"
        got = to_array(call(fn, inputs, shape, case=case,
                            on_error="these inputs are valid and must be accepted: a batch of "
                                     "samples of the given shape, or of flat samples holding as "
                                     "many numbers as one sample (reshaped to its shape)."),
                       fn, case, "the result")
        expected = as_batch(inputs, tuple(shape))
        expect_shape(got, expected.shape, fn, case, "the result",
                     "a flat sample of prod(shape) numbers is given one sample's shape, and "
                     "the batch axis stays in front.")
        if got.dtype != np.float32:
            fail(fn, case, f"the result has dtype {got.dtype}.",
                 "the model computes in float32: convert the validated array to it.")
        expect_close(got, expected, fn, case, "the result")
    for inputs, shape, what in bad:
        case = f"{what}: inputs={inputs}, shape={shape}"
        try:
            with closed(fn, case):
                fn(inputs, shape)
        except ExerciseError:
            raise
        except (ValueError, InputError) as err:
            if not str(err).strip():
                fail(fn, case, "it raised ValueError with no message.",
                     "say what was expected and what was given: the client reads it.")
            continue
        except NotImplementedError:
            call(fn, inputs, shape, case=case)   # the usual "not implemented yet" message
        except Exception as err:  # noqa: BLE001 - the learner's function raised something else
            fail(fn, case, f"it raised {type(err).__name__}: {err}",
                 "turn every problem with the inputs into a ValueError with a message (a "
                 "service answers it with 422; any other exception would be a 500).")
        dtype_kind = ("an array made from these lists keeps them as they are; its dtype's kind "
                      "tells signed and unsigned integers and floats from everything else.")
        fail(fn, case, "it accepted these inputs; they must be refused with ValueError.",
             {"strings": "strings are not numbers: " + dtype_kind,
              "booleans": "booleans are not numbers here (True is not a pixel value): "
                          + dtype_kind,
              "a NaN": "a model fed NaN answers NaN: refuse any value that is not finite.",
              "an infinity": "a model fed infinity answers NaN: refuse any value that is not "
                             "finite.",
              "an empty batch": "a batch needs at least one sample.",
              "one sample without its batch (a 1-D list)":
                  "a batch has one more axis than a sample: a 1-D list is one sample, not a "
                  "batch of them."}.get(
                 what, "compare each sample's shape (all axes after the first) with shape, "
                       "after reshaping flat samples of as many numbers as one sample holds."))
    passed(fn, len(good) + len(bad))


# ======================================================================================
# lesson 12b: protecting a model
# ======================================================================================
# The library's own verification: dl.load(path, public_key=...) and the service's loader.


@handed
class _SwapOnSecondOpen:
    """While active, the second time anything opens ``path`` to read it, the file is first
    replaced by ``forged`` (an attacker swapping the file between a check and a load)."""

    def __init__(self, path, forged: bytes):
        __tracebackhide__ = True
        import builtins
        import io
        self.path, self.forged, self.opens = os.path.realpath(path), forged, 0
        self.builtins, self.io, self.original = builtins, io, builtins.open

    def _open(self, file, mode="r", *args, **kwargs):
        __tracebackhide__ = True
        if isinstance(file, (str, bytes, os.PathLike)) and "r" in mode and "+" not in mode \
                and os.path.realpath(os.fsdecode(os.fspath(file))) == self.path:
            self.opens += 1
            if self.opens == 2:
                with self.original(self.path, "wb") as f:
                    f.write(self.forged)
        return self.original(file, mode, *args, **kwargs)

    def __enter__(self):
        __tracebackhide__ = True
        import pathlib
        self.builtins.open = self.io.open = self._open
        # Python 3.10's pathlib opens through an accessor that holds io.open itself
        self.accessor = getattr(pathlib, "_NormalAccessor", None)
        if self.accessor is not None:
            self.accessor.open = staticmethod(self._open)
        return self

    def __exit__(self, *exc):
        __tracebackhide__ = True
        self.builtins.open = self.io.open = self.original
        if self.accessor is not None:
            self.accessor.open = self.original
        return False


def _model_outputs(model) -> np.ndarray:
    __tracebackhide__ = True
    from ..backend import to_numpy
    x = np.linspace(-1, 1, 2 * 6, dtype=np.float32).reshape(2, 6)
    model.eval()
    return to_numpy(model.forward(x))


def load_signed(fn) -> None:
    """Check ``fn(path, public_key_file)``: the model saved at ``path``, only if ``path +
    ".sig"`` is the Ed25519 signature, by that public key, of the file's bytes; otherwise an
    error (any exception). The bytes that were verified must be the bytes loaded: when the file
    is swapped after the function's first read, loading the first bytes and refusing (a second
    read that differs) are both safe; loading the second is not."""
    __tracebackhide__ = True
    import tempfile
    from pathlib import Path

    from ..models import MLP
    from ..checkpoint import save
    from ..protect import keygen, write_signature
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        private, public = keygen(folder / "keys")
        other_private, other_public = keygen(folder / "other")
        good, forged = MLP([6, 4, 3], seed=1), MLP([6, 4, 3], seed=2)
        want = _model_outputs(good)

        def fresh(name, signer=private):
            __tracebackhide__ = True
            path = save(good, folder / name)
            if signer is not None:
                write_signature(path, path.read_bytes(), signer)
            return path

        def forged_bytes():
            __tracebackhide__ = True
            return save(forged, folder / "forged.npz").read_bytes()

        case = "a model signed by this key"
        path = fresh("good.npz")
        got = call(fn, str(path), str(public), case=case, opens=_SIGNED_OPENS)
        if not hasattr(got, "forward"):
            fail(fn, case, f"it returned {type(got).__name__}, not a model.",
                 "once the signature verifies, build the model from the bytes you read.")
        if not np.allclose(_model_outputs(got), want):
            fail(fn, case, "the model it returned is not the one that was saved.")

        refusals = [
            ("a forger rewrote the weights and the checkpoint's digest (the .sig is the old one)",
             lambda: (fresh("f1.npz").write_bytes(forged_bytes()), folder / "f1.npz")[1],
             "the checkpoint's own SHA-256 passes for a forged file (the forger wrote it): only "
             "the signature over the file's bytes can tell. Verify it before loading."),
            ("the model was signed by another key", lambda: fresh("f2.npz", other_private),
             "the signature verifies only with the signer's public key: verify with the one "
             "you were given, and let its failure stop the load."),
            ("the model has no signature beside it", lambda: fresh("f3.npz", None),
             "a missing .sig is a refusal, not a model to load unchecked."),
        ]
        for case, make, fix in refusals:
            path = make()
            try:
                with closed(fn, case, opens=_SIGNED_OPENS):
                    got = fn(str(path), str(public))
            except ExerciseError:
                raise
            except NotImplementedError:
                call(fn, str(path), str(public), case=case, opens=_SIGNED_OPENS)
            except Exception:  # noqa: BLE001 - refusing with any error is right
                continue
            fail(fn, case, "it returned a model; it must refuse (raise an error).", fix)

        case = ("an attacker swaps the file for a forged one right after your function first "
                "read it")
        path = fresh("swap.npz")
        swap, refused = _SwapOnSecondOpen(path, forged_bytes()), False
        try:
            with closed(fn, case, opens=_SIGNED_OPENS), swap:
                got = fn(str(path), str(public))
        except ExerciseError:
            raise
        except Exception as err:  # noqa: BLE001
            if swap.opens < 2:     # it refused the file before anything changed it
                fail(fn, case, f"it raised {type(err).__name__}: {err} — for a file that was "
                               f"correctly signed when it was read.",
                     "read the file once, verify those bytes, and build the model from the same "
                     "bytes (the exercise names the tool that builds a model from bytes already "
                     "read): then a swap changes nothing.")
            refused = True         # it read the swapped file and refused it: nothing forged loaded
        if not refused and np.allclose(_model_outputs(got), _model_outputs(forged)):
            fail(fn, case, "it loaded the forged model: it verified one reading of the file and "
                           "loaded another (the file was read again after the check).",
                 "read the bytes once, verify them, and build the model from those same bytes "
                 "(the exercise names the tool that builds a model from bytes already read), never "
                 "from the path again.")
    passed(fn, 1 + len(refusals) + 1, name="load_signed")


def _pad_cases():
    """(name, p1, p2, cribs, contradiction): two plaintexts and what the attacker knows of
    them. The first knows all of p1 (the lesson's setting before the cribs); the second only a
    fragment of p2; the third fragments of both, c1 longer than c2, with a crib of p1 past the
    end of c2; the fourth two cribs that overlap and agree; the last two that contradict (the
    position where they first do)."""
    __tracebackhide__ = True
    gen = np.random.default_rng(7)
    noise = bytes(gen.integers(0, 256, 40, dtype=np.uint8))
    a = b"weights of model A: 0.12 -0.5 3.25 ......"
    b = b"weights of model B: 9.99 0.001 -7"
    header = b"PK\x03\x04\x14\x00\x00\x00"
    return [
        ("all of p1 known", a, b, [(1, 0, a)], None),
        ("a crib of p2 only", noise, header + b"__arrays__.bin and more", [(2, 0, header)], None),
        ("cribs of both, c1 longer than c2", a + b"\x00" * 12, b,
         [(2, 0, b"weights of model "), (1, 25, b"-0.5 3.25"), (1, 40, b"\x00" * 8)], None),
        ("two cribs that overlap and agree", a, b, [(1, 0, a[:22]), (2, 17, b[17:30])], None),
        ("two cribs that contradict", a, b, [(1, 0, a[:20]), (2, 18, b"X" + b[19:25])], 18),
    ]


def _call_pad(fn, c1, c2, cribs, case):
    """(what fn returned, None), or (None, the ValueError it raised); any other error fails."""
    __tracebackhide__ = True
    try:
        with closed(fn, case, handed=(c1, c2, cribs)):
            return fn(c1, c2, cribs), None
    except ExerciseError:
        raise
    except ValueError as err:
        return None, err
    except Exception:  # noqa: BLE001 - the usual messages ("not implemented yet", the error)
        call(fn, c1, c2, cribs, case=case)
        raise


def two_time_pad(fn) -> None:
    """Check ``fn(c1, c2, cribs)`` -> ``(p1, p2)``: c1 and c2 are two plaintexts encrypted with
    AES-GCM under the same key AND the same nonce (the 16-byte tags removed), ``cribs`` a list
    of ``(message, offset, fragment)``: ``fragment`` (bytes) is known to stand at ``offset`` in
    plaintext ``message`` (1 or 2). Return p1 and p2 as lists as long as c1 and c2, each item
    the byte (an int 0-255) where the cribs tell it and None where they do not; raise
    ValueError when two cribs contradict each other."""
    __tracebackhide__ = True
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    gen = np.random.default_rng(8)
    cases = _pad_cases()
    for name, p1, p2, cribs, clash in cases:
        key, nonce = bytes(gen.integers(0, 256, 32, dtype=np.uint8)), b"\x01" * 12
        aes = AESGCM(key)
        c1, c2 = aes.encrypt(nonce, p1, None)[:-16], aes.encrypt(nonce, p2, None)[:-16]
        stream = bytes(x ^ y for x, y in zip(c1, p1))
        case = (f"{name}: c1 of {len(c1)} bytes, c2 of {len(c2)}, cribs "
                + ", ".join(f"({m}, {o}, {len(f)} bytes)" for m, o, f in cribs))
        known = {}                                  # position -> stream byte, from the cribs
        for m, o, frag in cribs:
            for i, byte in enumerate(frag):
                known.setdefault(o + i, (c1 if m == 1 else c2)[o + i] ^ byte)
        got, err = _call_pad(fn, c1, c2, list(cribs), case)
        if clash is not None:
            if err is not None:
                continue
            fail(fn, case, f"it returned {type(got).__name__} for cribs that contradict: at "
                           f"position {clash} they imply two different stream bytes.",
                 "each crib byte gives the stream byte at its position; when two cribs cover "
                 "one position and give two different stream bytes, one of the guesses is "
                 "wrong: raise ValueError, naming the position.")
        if err is not None:
            fail(fn, case, f"it raised ValueError ({err}), but these cribs agree wherever they "
                           f"overlap.",
                 "compare the STREAM bytes two cribs give at one position (each crib byte XOR its "
                 "own ciphertext's byte), not the plaintext bytes: a crib of p1 and a crib of p2 "
                 "at one position hold different letters and still agree.")
        out = expect_tuple(got, 2, fn, case, "p1, p2")
        want = [[(c[i] ^ known[i]) if i in known else None for i in range(len(c))]
                for c in (c1, c2)]
        for j, (g, w, c) in enumerate(zip(out, want, (c1, c2)), start=1):
            what = f"p{j}"
            if isinstance(g, (bytes, bytearray)):
                fail(fn, case, f"{what} is {type(g).__name__}: the bytes the cribs do not tell "
                               f"cannot be shown as bytes.",
                     "return a list with one item per byte of the ciphertext: the byte's value, "
                     "or None where it is unknown.")
            g = list(g)
            if len(g) != len(c):
                fail(fn, case, f"{what} has {len(g)} items; c{j} has {len(c)} bytes.",
                     "one item per ciphertext byte, None where the cribs say nothing: a crib of "
                     "one message can lie beyond the end of the other.")
            if g == w:
                continue
            bad = next(i for i in range(len(c)) if g[i] != w[i])
            shown = f"{what}[{bad}] is {g[bad]!r}, expected {w[bad]!r}"
            if w[bad] is None:
                fix = ("no crib covers this position, of either message: mark it None (0 is a "
                       "byte value, and it would be a guess).")
                fail(fn, case, f"{shown}.", fix)
            own = any(m == j and o <= bad < o + len(f) for m, o, f in cribs)
            other = any(m != j and o <= bad < o + len(f) for m, o, f in cribs)
            if g[bad] is None and own:
                fix = ("a crib of this message covers the position: it tells this message's own "
                       "byte, even where the other ciphertext has ended.")
            elif g[bad] is None and other:
                fix = ("a crib of the OTHER message covers this position: it gives the stream "
                       "byte there, and the stream byte gives this message's byte. Cribs of "
                       "either message reveal both.")
            elif bad < len(want[2 - j]) and g[bad] == want[2 - j][bad]:
                fix = ("that is the OTHER message's byte at this position: the stream byte "
                       "comes from a crib and ITS OWN ciphertext; only then XOR it with this "
                       "message's ciphertext.")
            elif g[bad] == stream[bad]:
                fix = "that is the stream byte: XOR it with this message's ciphertext byte."
            else:
                fix = ("write both ciphertext bytes at this position as plaintext XOR stream: "
                       "what does a known plaintext byte tell you, and what then?")
            fail(fn, case, f"{shown}.", fix)
    passed(fn, len(cases), name="two_time_pad")


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'fold_batchnorm': [
        ('write BatchNorm of the convolution output z as (a factor per channel) times z, plus (a '
         'shift per channel); then put z = W * x + b in and expand: which part multiplies x, '
         'which part does not?'),
        ('pseudo-code: factor = gamma / sqrt(___) with shape (F,); W_folded = W scaled along its '
         'first axis by factor (reshape the factor to F x 1 x 1 x 1); b_folded = (___ - ___) '
         'times factor, plus ___. Check it on the hand example before the exercise; BatchNorm\'s '
         'formula is in its first line'),
    ],
    'validate_batch': [
        ('NumPy raises ValueError when nested lists are ragged; an array\'s dtype has a one-letter '
         'kind (i, u, f for numbers; U for strings, b for booleans); NumPy also has a test for '
         'finite values that catches NaN and infinity'),
        ('in order: make an array (turn its ValueError into yours); refuse kinds that are not '
         'numbers; if it is 2-D with as many columns as one sample has numbers, reshape it to '
         '(N,) + shape; refuse no batch axis, an empty batch, or samples of another shape; refuse '
         'non-finite values; return float32. The list of what to refuse is in the exercise text'),
    ],
    'load_signed': [
        ('two things to get right: which bytes the signature is checked on, and which bytes the '
         'model is built from. Must they be the same? What could happen between two reads of a '
         'file?'),
        ('pseudo-code: data = the file read ___ times; record = the .sig file parsed as JSON; '
         'signature = the base64 field decoded; the public key loaded from its PEM file; verify '
         '(signature, ___) (it raises when they do not match); model = built from ___ with '
         'the tool that builds a model from bytes already read, given the path (for its messages) '
         'and ___'),
    ],
    'two_time_pad': [
        ('counter mode, which GCM uses, encrypts by XOR with a keystream that depends only on the '
         'key and the nonce, the same for both messages. A known byte of either plaintext, with '
         'its own ciphertext byte, gives what? And that, with the other ciphertext byte?'),
        ('pseudo-code: keep a table from position to stream byte, empty at first. For each crib '
         '(m, offset, fragment) and each byte of its fragment: its position is the offset plus '
         'the byte\'s place in the fragment; the stream byte there is the ciphertext of message '
         '___ at that position XOR ___; if the table already holds a DIFFERENT byte there, '
         'raise ___; else store it. Then, for every position of c1: its byte XOR the table\'s '
         'byte where the table has one, else ___; the same for c2'),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'fold_batchnorm': ['minus the running mean', 'old bias minus', '(b - mean)', 'b - mean',
        'gamma over the standard deviation', 'gamma / sqrt', 'gamma / np.sqrt', 'plus beta',
        '+ beta', 'times the factor'],
    'validate_batch': ['np.asarray(', 'dtype.kind', 'np.isfinite', 'isfinite',
        '.reshape(-1, *shape)'],
    'load_signed': ['read once', 'read the file once', 'read it once', 'read_bytes', 'only once',
        'load_bytes(path, data)'],
    'two_time_pad': ['c1 ^ c2 ^ p1', 'c1[i] ^ c2[i] ^ p1[i]', 'xor p1', 'p1 xor', 'xor with p1',
        '^ byte', 'stream[i]', 'c[i] ^', 'reveal both', 'either message reveals'],
}
