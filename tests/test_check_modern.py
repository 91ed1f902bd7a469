"""The lesson 15c exercise checks (dlcourse/check/tokens_and_block.py): a right answer passes, a
right answer written differently passes, and each common wrong answer gets the message that
names its mistake. The checks' references (the library's RMSNorm and rope) are held to finite
differences here, and the naive BPE learner to the fast one.

Each wrong answer is a small function named after its mistake, written as a learner would."""
from collections import Counter

import numpy as np
import pytest

import dlcourse as dl
import dlcourse.check as C
from dlcourse.data import bpe
from support.expect import expect_fail


# ---- the references
def test_the_rmsnorm_reference_agrees_with_finite_differences_in_float64():
    x = np.random.default_rng(0).standard_normal((3, 2, 5))
    layer = dl.RMSNorm(5, eps=1e-3, dtype=np.float64)
    layer.params["g"] = np.random.default_rng(1).uniform(0.5, 2.0, 5)
    assert dl.gradcheck(layer, x, verbose=False) < 1e-6


def test_the_naive_bpe_learner_makes_the_fast_learners_merges():
    words = Counter(["héé", " é", "aaa", "abab", "baba", "ü"] * 3 + ["aaa"])
    chunks = [list(w.encode("utf-8")) for w in words]
    naive = bpe.learn_merges_naive(chunks, list(words.values()), 10)
    assert naive == bpe.learn_merges([list(c) for c in chunks], list(words.values()), 10)


# ---- bpe_merge_step
def _ids(c):
    return list(c.encode("utf-8")) if isinstance(c, str) else list(c)


def _merge(ids, pair, new):
    out, i = [], 0
    while i < len(ids):
        if ids[i:i + 2] == list(pair):
            out.append(new)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def bpe_good(chunks, freqs, new):
    ids = [_ids(c) for c in chunks]
    counts = {}
    for c, f in zip(ids, freqs):
        for p in zip(c, c[1:]):
            counts[p] = counts.get(p, 0) + f
    pair = min(counts, key=lambda p: (-counts[p], p))
    return pair, [_merge(c, pair, new) for c in ids]


def bpe_sorted_and_bytes(chunks, freqs, new):      # right, written differently
    ids = [list(bytes(c, "utf-8")) if isinstance(c, str) else [int(t) for t in c] for c in chunks]
    counts = Counter()
    for c, f in zip(ids, freqs):
        counts.update({p: 0 for p in zip(c, c[1:])})
        for k in range(len(c) - 1):
            counts[c[k], c[k + 1]] += f
    best = max(counts.values())
    pair = sorted(p for p, n in counts.items() if n == best)[0]
    merged = []
    for c in ids:
        s, out = 0, []
        while s < len(c):
            if s < len(c) - 1 and (c[s], c[s + 1]) == pair:
                out, s = out + [new], s + 2
            else:
                out, s = out + [c[s]], s + 1
        merged.append(np.array(out))
    return np.array(pair), merged


def bpe_ties_the_other_way(chunks, freqs, new):
    pair, _ = bpe_good(chunks, freqs, new)
    ids = [_ids(c) for c in chunks]
    counts = Counter()
    for c, f in zip(ids, freqs):
        for p in zip(c, c[1:]):
            counts[p] += f
    pair = max(counts, key=lambda p: (counts[p], p))
    return pair, [_merge(c, pair, new) for c in ids]


def bpe_overlaps_once(chunks, freqs, new):
    ids = [_ids(c) for c in chunks]
    counts = Counter()
    for c, f in zip(ids, freqs):
        i = 0
        while i < len(c) - 1:
            counts[c[i], c[i + 1]] += f
            i += 2 if i + 2 < len(c) and c[i] == c[i + 1] == c[i + 2] else 1
    pair = min(counts, key=lambda p: (-counts[p], p))
    return pair, [_merge(c, pair, new) for c in ids]


def bpe_merges_overlaps_twice(chunks, freqs, new):
    pair, _ = bpe_good(chunks, freqs, new)
    out = []
    for c in map(_ids, chunks):
        out.append([new if list(c[i:i + 2]) == list(pair) else c[i] for i in range(len(c))])
    return pair, out


def bpe_characters(chunks, freqs, new):
    ids = [[ord(ch) for ch in c] if isinstance(c, str) else list(c) for c in chunks]
    counts = Counter()
    for c, f in zip(ids, freqs):
        for p in zip(c, c[1:]):
            counts[p] += f
    pair = min(counts, key=lambda p: (-counts[p], p))
    return pair, [_merge(c, pair, new) for c in ids]


def bpe_no_freqs(chunks, freqs, new):
    return bpe_good(chunks, [1] * len(chunks), new)


def test_bpe_merge_step_accepts_right_answers(capsys):
    C.bpe_merge_step(bpe_good)
    C.bpe_merge_step(bpe_sorted_and_bytes)
    assert capsys.readouterr().out.count("\u2713") == 2


@pytest.mark.parametrize("wrong, words", [
    (bpe_ties_the_other_way, "ties are broken the other way"),
    (bpe_overlaps_once, "overlapping pairs are counted once"),
    (bpe_merges_overlaps_twice, "merged twice"),
    (bpe_characters, "CHARACTERS"),
    (bpe_no_freqs, "freqs[i] times"),
])
def test_bpe_merge_step_names_each_mistake(wrong, words):
    expect_fail(C.bpe_merge_step, wrong, words)


# ---- rmsnorm_backward
def rms_good(dout, x, g, eps):
    r = 1 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
    x_hat = x * r
    d = dout * g
    dx = r * (d - x_hat * (d * x_hat).mean(axis=-1, keepdims=True))
    return dx, (dout * x_hat).reshape(-1, x.shape[-1]).sum(axis=0)


def rms_by_the_chain_rule(dout, x, g, eps):        # right, written differently
    D = x.shape[-1]
    ms = np.einsum("...d,...d->...", x, x)[..., None] / D + eps
    rms = ms ** 0.5
    d = dout * g
    dms = (d * x).sum(-1, keepdims=True) * (-0.5) * ms ** -1.5
    dx = d / rms + dms * 2 * x / D
    return dx, (dout * x / rms).reshape(-1, D).sum(axis=0)


def _rms_with(center=False, reduce=np.mean, eps_outside=False):
    def rms(dout, x, g, eps):
        ms = (x * x).mean(axis=-1, keepdims=True)
        s = np.sqrt(ms) + eps if eps_outside else np.sqrt(ms + eps)
        x_hat = x / s
        d = dout * g
        dx = d - x_hat * reduce(d * x_hat, axis=-1, keepdims=True)
        if center:
            dx = dx - d.mean(axis=-1, keepdims=True)
        return dx / s, (dout * x_hat).reshape(-1, x.shape[-1]).sum(axis=0)
    rms.__name__ = f"rms_center{center}_{reduce.__name__}_eps_outside{eps_outside}"
    return rms


rms_layernorm_mean = _rms_with(center=True)
rms_sum_not_mean = _rms_with(reduce=np.sum)
rms_eps_outside = _rms_with(eps_outside=True)


def rms_dg_of_x(dout, x, g, eps):
    dx, _ = rms_good(dout, x, g, eps)
    return dx, (dout * x).reshape(-1, x.shape[-1]).sum(axis=0)


def test_rmsnorm_backward_accepts_right_answers(capsys):
    C.rmsnorm_backward(rms_good)
    C.rmsnorm_backward(rms_by_the_chain_rule)
    assert capsys.readouterr().out.count("\u2713") == 2


@pytest.mark.parametrize("wrong, words", [
    (rms_layernorm_mean, "LayerNorm's backward"),
    (rms_sum_not_mean, "1/D"),
    (rms_eps_outside, "eps sits outside the root"),
    (rms_dg_of_x, "NORMALIZED x"),
])
def test_rmsnorm_backward_names_each_mistake(wrong, words):
    expect_fail(C.rmsnorm_backward, wrong, words)


# ---- rope
def _angles(T, d, start, freq=2.0):
    theta = 10000.0 ** (-freq * np.arange(d // 2) / d)
    return np.arange(start, start + T)[:, None] * theta


def rope_good(x, start):
    *_, T, d = x.shape
    a = _angles(T, d, start)
    y = np.empty_like(x)
    y[..., 0::2] = x[..., 0::2] * np.cos(a) - x[..., 1::2] * np.sin(a)
    y[..., 1::2] = x[..., 0::2] * np.sin(a) + x[..., 1::2] * np.cos(a)
    return y


def rope_complex(x, start):                        # right, written differently
    *_, T, d = x.shape
    z = x[..., 0::2] + 1j * x[..., 1::2]
    z = z * np.exp(1j * _angles(T, d, start))
    return np.stack([z.real, z.imag], axis=-1).reshape(x.shape)


def rope_rotate_half(x, start):
    *_, T, d = x.shape
    a = _angles(T, d, start)
    x0, x1 = x[..., :d // 2], x[..., d // 2:]
    return np.concatenate([x0 * np.cos(a) - x1 * np.sin(a), x0 * np.sin(a) + x1 * np.cos(a)], -1)


def rope_sin_flipped(x, start):
    *_, T, d = x.shape
    a = -_angles(T, d, start)
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * a)
    return np.stack([z.real, z.imag], axis=-1).reshape(x.shape)


def rope_start_ignored(x, start):
    return rope_good(x, 0)


def test_rope_accepts_right_answers(capsys):
    C.rope(rope_good)
    C.rope(rope_complex)
    assert capsys.readouterr().out.count("\u2713") == 2


@pytest.mark.parametrize("wrong, words", [
    (rope_rotate_half, "rotate-half layout"),
    (rope_sin_flipped, "sine's sign is flipped"),
    (rope_start_ignored, "the start is ignored"),
])
def test_rope_names_each_mistake(wrong, words):
    expect_fail(C.rope, wrong, words)

