"""Sampling text from a causal model, with a key/value cache and without.

Introduced in notebook ``15_attention`` (samples at several temperatures) and timed in
``16_flash_attention`` (with and without the cache); ``dlcourse generate`` and
``Transformer.generate`` call :func:`generate`.

One step of generation: run the model on the context, take the logits of the last position
(N, V), divide by the temperature, keep the ``top_k`` largest (the rest get probability 0),
softmax, keep the nucleus (``top_p``: the smallest set of the likeliest ids whose probability
reaches p; Holtzman et al., 2020), draw one id per row, append it, repeat.

**Without a cache** each step runs ``model.forward`` on the whole context: T positions of
work for one new token. **With the cache** (``model.step(ids, past)``) each block keeps the keys
and values of the positions it has seen, and a step runs the one new position only: its query
meets the stored keys. Both paths see the same context and draw with the same random numbers,
so with one seed they give the same tokens (up to the rounding of a different order of sums,
which changes a draw only when a random number falls exactly on a boundary).

**The context window.** The model knows ``max_len`` positions (learned position vectors), so
the context cannot grow for ever. Here the context is the tokens since a *window start*; when
it would exceed ``max_len``, the window restarts at the last ``max_len // 2`` tokens (the
cache is then rebuilt from them in one call). Sliding by one token instead would move every
position and make every cached key stale; restarting by half keeps the cache useful, and both
paths follow the same rule, so they stay comparable token by token.

The draws use a NumPy generator on the host (``seed``), whatever the model's device: the
(N, V) probabilities are copied there, a few hundred numbers per step.

**A recurrent model** (``dl.RecurrentLM``, ``recurrent = True``, no ``max_len``) has no window:
its ``step(ids, state)`` has the same form, the state (each layer's last h, and c) playing the
part of the cache, so one new token costs one step however long the context.

**What it refuses.** A model that is not a causal language model: one without ``max_len`` (an
MLP, a CNN), or a Transformer built with ``causal=False``, whose positions see the ones after
them, which do not exist yet while generating (and the cache, which only ever holds the past,
would then change its tokens). Prompt ids that are not whole numbers (1.7 is not a token; 1.0
is 1). A text prompt is taken by a model that carries its characters (``chars``), and then the
result is text too.
"""
from __future__ import annotations

import numpy as np

from ._validate import model_class_error, number, whole_number
from .attention import MultiHeadAttention
from .backend import get_array_module, to_numpy
from .data.text import Characters
from .layer_base import eval_mode, every_layer

__all__ = ["generate", "sample_next", "nucleus", "check_language_model"]


def sample_next(logits, temperature: float = 1.0, top_k: int | None = None, gen=None,
                top_p: float | None = None):
    """One id per row from logits (N, V): softmax(logits / temperature) restricted to the
    ``top_k`` largest logits (None: all), then to the nucleus: ids sorted likeliest first, the
    shortest prefix whose probabilities sum to at least ``top_p`` kept (the likeliest id
    always; ties in the order of the ids), renormalized. ``top_p`` in (0, 1]; None or 1: all,
    so the draw is plain sampling's, for the same ``gen``. ``temperature=0`` takes the largest
    (greedy). ``gen``: a ``np.random.Generator`` (None: a fresh unseeded one). Returns int64
    (N,), on the host."""
    z = to_numpy(logits).astype(np.float64)
    if z.ndim != 2:
        raise ValueError(f"sample_next expects logits of shape (N, V), got {z.shape}: take the "
                         f"last position first, logits[:, -1].")
    temperature = number(temperature, "temperature", "temperature=0.8", 0.0, None)
    if temperature == 0:
        return z.argmax(axis=1)
    z = z / temperature
    if top_k is not None and top_k < z.shape[1]:
        kth = np.sort(z, axis=1)[:, -top_k][:, None]           # the k-th largest of each row
        z = np.where(z >= kth, z, -np.inf)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    if top_p is not None and number(top_p, "top_p", "top_p=0.9", 0.0, 1.0, low_open=True,
                                    high_open=False) < 1:
        p = nucleus(p, top_p)
    gen = np.random.default_rng() if gen is None else gen
    u = gen.random((z.shape[0], 1))                             # one uniform number per row
    return np.minimum((p.cumsum(axis=1) < u).sum(axis=1), z.shape[1] - 1)   # inverse CDF


def nucleus(p, top_p: float):
    """p (N, V) rows of probabilities -> the same rows with all but the nucleus set to 0 and
    renormalized: in each row, sorted likeliest first, keep an id while the probability of the
    ids before it is still below top_p (so the kept set is the smallest that reaches top_p)."""
    order = np.argsort(-p, axis=1, kind="stable")                   # likeliest first
    sorted_p = np.take_along_axis(p, order, axis=1)
    before = np.cumsum(sorted_p, axis=1) - sorted_p                 # mass of the ids before
    keep = np.zeros_like(p, dtype=bool)
    np.put_along_axis(keep, order, before < top_p, axis=1)
    p = np.where(keep, p, 0.0)
    return p / p.sum(axis=1, keepdims=True)


def _device_ids(model, ids):
    """ids (host int64) as an array on the model's device."""
    xp = get_array_module(*model.params.values())
    return xp.asarray(ids)


def check_language_model(model, cache: bool = True) -> None:
    """Refuse a model :func:`generate` cannot continue a prompt with (see the module)."""
    if isinstance(model, type):
        raise model_class_error(model, "generate")
    name = type(model).__name__
    recurrent = getattr(model, "recurrent", False)      # dl.RecurrentLM: no max_len, a state
    if (getattr(model, "max_len", None) is None and not recurrent) \
            or not callable(getattr(model, "forward", None)):
        raise TypeError(f"generate continues a prompt with a causal language model (token ids "
                        f"(N, T) -> logits (N, T, vocab), knowing max_len positions), such as "
                        f"dl.Transformer(vocab, d_model, heads, layers, max_len); got {name}, "
                        f"which is not one. Train a Transformer on text (dlcourse train --model "
                        f"transformer --dataset text) and generate with that.")
    open_ = [layer for layer in every_layer(model)
             if isinstance(layer, MultiHeadAttention) and not layer.causal]
    if open_:
        raise ValueError(f"generate draws each token from the ones before it, but this {name} "
                         f"is not causal ({len(open_)} attention layer(s) built with "
                         f"causal=False): its positions look at later ones, which do not exist "
                         f"yet while generating, and the key/value cache would change its "
                         f"tokens. Build it with causal=True (the default) and train it again.")
    if cache and not callable(getattr(model, "step", None)):
        raise TypeError(f"generate(cache=True) runs the model's step(ids, past) with a key/value "
                        f"cache, and this {name} has no step method: pass cache=False.")


def _prompt_ids(model, prompt):
    """(ids as int64 (N, T0) on the host, whether the prompt was 1-D, the vocabulary when the
    prompt was text (else None))."""
    vocab = None
    if isinstance(prompt, str):
        chars = getattr(model, "chars", None)
        if not chars:
            raise TypeError(f"generate got the text prompt {prompt!r:.40}, but this "
                            f"{type(model).__name__} carries no characters (chars=None), so it "
                            f"cannot read text: give token ids (encode the text with the "
                            f"vocabulary it was trained on: ids = text_data.encode(prompt)), or "
                            f"build it with chars=text_data.vocab.chars.")
        vocab = Characters(chars)
        try:
            prompt = vocab.encode(prompt)
        except ValueError as err:
            raise ValueError(f"generate(prompt={prompt!r:.40}): {err}") from None
    ids = np.asarray(to_numpy(prompt))
    if ids.dtype.kind not in "iuf":
        raise TypeError(f"generate expects a prompt of integer token ids (N, T0) or (T0,)"
                        f"{' or text' if getattr(model, 'chars', None) else ''}, got dtype "
                        f"{ids.dtype}: convert with np.asarray(ids, dtype=np.int64).")
    if ids.dtype.kind == "f":
        whole = np.isfinite(ids) & (ids == np.round(ids))
        if not whole.all():
            bad = float(ids[~whole].ravel()[0])
            raise ValueError(f"generate expects integer token ids, got {bad!r} in the prompt "
                             f"(dtype {ids.dtype}): an id is the row of a token in the "
                             f"embedding table, never a fraction. Give the ids themselves "
                             f"(astype(np.int64) only if the values are whole).")
    seq = np.array(ids, dtype=np.int64, ndmin=2)                       # (N, T0), host
    if seq.ndim != 2 or seq.shape[1] == 0:
        raise ValueError(f"generate expects a prompt of ids (N, T0) or (T0,) with T0 >= 1, got "
                         f"shape {ids.shape}: begin with at least one token.")
    return seq, ids.ndim == 1, vocab


def generate(model, prompt, steps: int, *, temperature: float = 1.0, top_k: int | None = None,
             seed: int | None = None, cache: bool = True, top_p: float | None = None):
    """Continue ``prompt`` by ``steps`` ids drawn from a causal ``model``.

    model: token ids (N, T) -> logits (N, T, V) with ``max_len`` (such as ``dl.Transformer``);
    ``cache=True`` needs its ``step(ids, past) -> (logits, past)`` too.
    prompt: int ids (N, T0) or (T0,), at least one id per row. Returns int64 (N, T0 + steps)
    (or (T0 + steps,) for a 1-D prompt), on the host: the prompt, then the new ids. A model
    that carries its characters (``chars``) also takes a str, and then returns a str.
    temperature, top_k, top_p: as :func:`sample_next`; seed: the draws' generator (same seed, same
    model, same prompt: same ids, with the cache or without). The model runs in evaluation mode.
    """
    steps = whole_number(steps, "generate(steps=...)", minimum=0)
    if top_k is not None:
        top_k = whole_number(top_k, "generate(top_k=...)")
    if top_p is not None:
        top_p = number(top_p, "generate(top_p=...)", "top_p=0.9 (keep the likeliest ids "
                       "holding 90 % of the probability)", 0.0, 1.0, low_open=True,
                       high_open=False)
    check_language_model(model, cache)
    seq, one, vocab = _prompt_ids(model, prompt)                       # (N, T0), host
    gen = np.random.default_rng(seed)
    max_len = model.max_len
    start, past, seen = 0, None, 0       # window start; the cache holds seq[:, start:start+seen]
    with eval_mode(model):
        for _ in range(steps):
            if max_len is not None and seq.shape[1] - start > max_len:   # full: restart it
                start, past, seen = seq.shape[1] - max(1, max_len // 2), None, 0
            if cache:
                logits, past = model.step(_device_ids(model, seq[:, start + seen:]), past)
                seen = seq.shape[1] - start
            else:
                logits = model.forward(_device_ids(model, seq[:, start:]))
            new = sample_next(logits[:, -1], temperature, top_k, gen, top_p)
            seq = np.concatenate([seq, new[:, None]], axis=1)
    if vocab is not None:
        return vocab.decode(seq[0])
    return seq[0] if one else seq
