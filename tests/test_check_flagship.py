"""Lessons 15b and 16b (issue 38): the learner builds the flagship. Each check passes the right
answers (on the cupy backend with one more case on CuPy arrays, whose results must stay on the
GPU), names each known mistake, accepts a right answer written differently, refuses a
full-matrix FlashAttention naming the memory rule; and the training hook gives the library's
loss curve when the learner's functions train the model."""
from __future__ import annotations

import inspect
import textwrap

import numpy as np
import pytest

import dlcourse as dl
from dlcourse import backend
from support import flagship_answers as answers

EXERCISES = ["mha_forward", "transformer_block_backward", "lm_loss", "train_step",
             "flash_forward_tiled", "flash_backward"]


def _variant(name, old, new):
    """The right answer ``name`` with one piece of its source replaced."""
    source = textwrap.dedent(inspect.getsource(getattr(answers, name)))
    assert old in source, (name, old)
    namespace = dict(vars(answers))
    exec(compile(source.replace(old, new), f"<{name}>", "exec"), namespace)  # noqa: S102
    return namespace[name]


@pytest.mark.parametrize("name", EXERCISES)
def test_the_right_answers_pass(name, capsys):
    getattr(dl.check, name)(getattr(answers, name))
    assert f"\u2713 {name}" in capsys.readouterr().out


def test_the_right_answers_run_a_case_on_each_backend(device, capsys):
    """On the cupy backend (a GPU, or the CuPy stand-in) each check adds a case with CuPy arrays
    (the cache, the model and the tokens included) and requires the results to stay there."""
    for name in EXERCISES:
        getattr(dl.check, name)(getattr(answers, name))
    out = capsys.readouterr().out
    where = "(NumPy and CuPy)" if device == "gpu" else "(NumPy)"
    assert out.count(where) == len(EXERCISES), out


def _to_host(value):
    """``value`` with every CuPy array in it (inside tuples and dicts) copied to the host."""
    if isinstance(value, dict):
        return {k: _to_host(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_to_host(v) for v in value)
    return backend.to_numpy(value) if backend.device_of(value) == "gpu" else value


@pytest.mark.parametrize("name", EXERCISES)
def test_a_right_value_sent_back_to_the_host_is_named_on_the_cupy_backend(device, name):
    if device != "gpu":
        pytest.skip("the host/device mix-up exists on the cupy backend only")
    if name == "train_step":    # it updates model.params in place: its mix-up is moments made on
        wrong = _variant(name, "np.zeros_like(p)", "np.zeros(p.shape)")     # the host instead
        words = ["on the GPU (CuPy arrays)", "numpy.ndarray"]
    else:
        def wrong(*args):
            return _to_host(getattr(answers, name)(*args))
        wrong.__name__ = name
        words = ["on the GPU", "came back as a NumPy array"]
    with pytest.raises(dl.check.ExerciseError) as err:
        getattr(dl.check, name)(wrong)
    assert all(w in str(err.value) for w in words), str(err.value)


MISTAKES = [
    ("mha_forward", "reshape(N, T, n_heads, d).transpose(0, 2, 1, 3)", "reshape(N, n_heads, T, d)",
     "transpose is missing when splitting"),
    ("mha_forward", "a.transpose(0, 2, 1, 3).reshape(N, T, D)", "a.reshape(N, T, D)",
     "transpose is missing when merging"),
    ("mha_forward", "causal=causal)", "causal=False)", "causal argument"),
    ("mha_forward", "reshape(N, T, D) @ Wo", "reshape(N, T, D)", "output projection Wo"),
    ("transformer_block_backward", "dh = dout + ln_backward", "dh = ln_backward",
     "second skip path is missing"),
    ("transformer_block_backward", "dx = dh + ln_backward", "dx = ln_backward",
     "first skip path is missing"),
    ("transformer_block_backward", "mean(axis=-1, keepdims=True)",
     "mean(axis=1, keepdims=True)", "LayerNorm's means are taken over the wrong axis"),
    ("transformer_block_backward", "(0.5 * (1 + t) + 0.5 * u * (1 - t * t) * GELU_C * "
     "(1 + 3 * GELU_A * u * u))", "(0.5 * (1 + t))", "GELU's derivative misses a term"),
    ("transformer_block_backward", "(0.5 * (1 + t) + 0.5 * u * (1 - t * t) * GELU_C * "
     "(1 + 3 * GELU_A * u * u))", "(u > 0)", "GELU's derivative is not ReLU's"),
    ("transformer_block_backward", "return y.transpose(0, 2, 1, 3).reshape(N, T, D)",
     "return y.reshape(N, T, D)", "heads' transpose is missing"),
    ("lm_loss", "z = logits[:, :-1]\n    y = tokens[:, 1:]", "z = logits[:, :-1]\n    y = "
     "tokens[:, :-1]", "shift by one is missing"),
    ("lm_loss", "else y != pad_id", "else xp.ones(y.shape, dtype=bool)",
     "padding is not masked"),
    ("lm_loss", "count = max(int(keep.sum()), 1)", "count = y.size",
     "still counted in the mean"),
    ("train_step", "(m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)",
     "m / (np.sqrt(v) + eps)", "bias correction is missing"),
    ("train_step", "p *= 1 - lr * weight_decay\n", "g = g + weight_decay * p\n",
     "went into the gradient"),
    ("train_step", "clip = max_norm / norm if norm > max_norm else 1.0", "clip = 1.0",
     "not clipped"),
    ("train_step", "state[\"t\"] = t = state.get(\"t\", 0) + 1",
     "state.clear()\n    state[\"t\"] = t = 1", "state is not kept"),
    ("flash_forward_tiled", "alpha * l + ", "l + ", "not rescaled"),
    ("flash_forward_tiled", "lse[:, :, i0:i1] = (m + xp.log(xp.where(l > 0, l, 1)))[..., 0]",
     "lse[:, :, i0:i1] = m[..., 0]", "lse is only the running max"),
    ("flash_forward_tiled", "qi = q[:, :, i0:i1] * scale", "qi = q[:, :, i0:i1]",
     "not divided by sqrt(d)"),
    ("flash_forward_tiled", "+ (Tk - Tq)", "", "aligned top-left"),
    ("flash_backward", "D = (dout * out).sum(axis=-1, keepdims=True)",
     "D = dout.sum(axis=-1, keepdims=True)", "D is the row sum of dout alone"),
    ("flash_backward", "ds = p * (dp - D[:, :, i0:i1])", "ds = p * dp", "the term D is missing"),
    ("flash_backward", "p = xp.exp(s - lse[:, :, i0:i1, None])", "p = xp.exp(s)",
     "recomputed without lse"),
    ("flash_backward", "dk[:, :, j0:j1] += ds.swapaxes(-1, -2) @ q[:, :, i0:i1] * scale",
     "dk[:, :, j0:j1] += ds.swapaxes(-1, -2) @ q[:, :, i0:i1]", "dk misses the 1/sqrt(d)"),
    ("flash_backward", "            if causal:\n                seen",
     "            if False:\n                seen", "causal mask is not applied"),
]


@pytest.mark.parametrize("name, old, new, words", MISTAKES,
                         ids=[f"{m[0]}-{m[3][:24]}" for m in MISTAKES])
def test_each_known_mistake_is_named(name, old, new, words):
    wrong = _variant(name, old, new)
    with pytest.raises(dl.check.ExerciseError) as err:
        getattr(dl.check, name)(wrong)
    assert words in str(err.value), str(err.value)


# Right answers written differently: einsum, another tile order, float64 inside.
def _mha_einsum(x, Wq, Wk, Wv, Wo, n_heads, causal):
    N, T, D = x.shape
    q, k, v = (np.einsum("ntd,de->nte", x, W).reshape(N, T, n_heads, -1) for W in (Wq, Wk, Wv))
    s = np.einsum("nthd,nshd->nhts", q, k) / np.sqrt(D // n_heads)
    if causal:
        s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    a = np.einsum("nhts,nshd->nthd", p, v).reshape(N, T, D)
    return np.einsum("ntd,de->nte", a, Wo).astype(x.dtype)


def _flash_forward_query_tiles_inside(q, k, v, block_q, block_k, causal):
    """Key tiles outside, query tiles inside, the running state of every row kept at once, and
    float64 inside."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    N, H, Tq, d = q.shape
    Tk = k.shape[2]
    m = np.full((N, H, Tq, 1), -np.inf)
    l, o = np.zeros((N, H, Tq, 1)), np.zeros((N, H, Tq, d))
    for j0 in range(0, Tk, block_k):
        kj, vj = k[:, :, j0:j0 + block_k], v[:, :, j0:j0 + block_k]
        for i0 in range(0, Tq, block_q):
            rows = slice(i0, i0 + block_q)
            s = np.einsum("nhid,nhjd->nhij", q[:, :, rows], kj) / np.sqrt(d)
            if causal:
                i = np.arange(Tq)[rows][:, None] + Tk - Tq
                s = np.where(np.arange(j0, j0 + kj.shape[2])[None, :] <= i, s, -np.inf)
            m_new = np.maximum(m[:, :, rows], s.max(axis=-1, keepdims=True))
            ref = np.where(np.isinf(m_new), 0.0, m_new)
            scale = np.exp(m[:, :, rows] - ref)
            p = np.exp(s - ref)
            l[:, :, rows] = scale * l[:, :, rows] + p.sum(axis=-1, keepdims=True)
            o[:, :, rows] = scale * o[:, :, rows] + np.einsum("nhij,nhjd->nhid", p, vj)
            m[:, :, rows] = m_new
    return o / l, (m + np.log(l))[..., 0]


def _flash_backward_query_tiles_outside(dout, q, k, v, out, lse, block_q, block_k, causal):
    N, H, Tq, d = q.shape
    Tk = k.shape[2]
    D = np.einsum("nhid,nhid->nhi", dout, out)[..., None]
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for i0 in range(0, Tq, block_q):
        r = slice(i0, i0 + block_q)
        for j0 in range(0, Tk, block_k):
            c = slice(j0, j0 + block_k)
            s = np.einsum("nhid,nhjd->nhij", q[:, :, r], k[:, :, c]) / np.sqrt(d)
            if causal:
                i = np.arange(Tq)[r][:, None] + Tk - Tq
                s = np.where(np.arange(Tk)[c][None, :] <= i, s, -np.inf)
            p = np.exp(s - lse[:, :, r][..., None])
            dv[:, :, c] += np.einsum("nhij,nhid->nhjd", p, dout[:, :, r])
            ds = p * (np.einsum("nhid,nhjd->nhij", dout[:, :, r], v[:, :, c]) - D[:, :, r])
            dq[:, :, r] += np.einsum("nhij,nhjd->nhid", ds, k[:, :, c]) / np.sqrt(d)
            dk[:, :, c] += np.einsum("nhij,nhid->nhjd", ds, q[:, :, r]) / np.sqrt(d)
    return dq, dk, dv


@pytest.mark.parametrize("name, answer", [
    ("mha_forward", _mha_einsum),
    ("flash_forward_tiled", _flash_forward_query_tiles_inside),
    ("flash_backward", _flash_backward_query_tiles_outside),
    ("lm_loss", _variant("lm_loss", "d[xp.arange(B)[:, None], xp.arange(T - 1)[None, :], y] -= 1",
                         "d -= xp.eye(V)[y]")),
], ids=["mha_einsum", "flash_forward_other_order", "flash_backward_other_order", "lm_one_hot"])
def test_a_right_answer_written_differently_passes(name, answer, capsys):
    getattr(dl.check, name)(answer)
    assert "\u2713" in capsys.readouterr().out


def _full_forward(q, k, v, block_q, block_k, causal):
    Tq, Tk, d = q.shape[2], k.shape[2], q.shape[3]
    s = q @ k.swapaxes(-1, -2) / np.sqrt(d)
    if causal:
        s = np.where(np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + Tk - Tq, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    l = e.sum(axis=-1, keepdims=True)
    return e @ v / l, (m + np.log(l))[..., 0]


def _full_backward(dout, q, k, v, out, lse, block_q, block_k, causal):
    Tq, Tk, d = q.shape[2], k.shape[2], q.shape[3]
    s = q @ k.swapaxes(-1, -2) / np.sqrt(d)
    if causal:
        s = np.where(np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + Tk - Tq, s, -np.inf)
    p = np.exp(s - lse[..., None])
    dp = dout @ v.swapaxes(-1, -2)
    ds = p * (dp - (dout * out).sum(axis=-1, keepdims=True))
    return ds @ k / np.sqrt(d), ds.swapaxes(-1, -2) @ q / np.sqrt(d), p.swapaxes(-1, -2) @ dout


def _full_in_float16(q, k, v, block_q, block_k, causal):
    """The whole matrix, but in 16 bits: a quarter of the bytes, still the rule broken."""
    Tq, Tk = q.shape[2], k.shape[2]
    s = np.empty((q.shape[0], q.shape[1], Tq, Tk), np.float16)
    del s
    return answers.flash_forward_tiled(q, k, v, block_q, block_k, causal)


@pytest.mark.parametrize("name, answer", [("flash_forward_tiled", _full_forward),
                                          ("flash_backward", _full_backward),
                                          ("flash_forward_tiled", _full_in_float16)],
                         ids=["forward", "backward", "forward_float16_matrix"])
def test_a_full_matrix_answer_is_refused_naming_the_memory_rule(name, answer):
    with pytest.raises(dl.check.ExerciseError) as err:
        getattr(dl.check, name)(answer)
    message = str(err.value)
    assert "memory rule (no Tq x Tk temporary)" in message and "2048 x 2048" in message, message


def test_a_strip_of_every_key_for_many_query_rows_is_refused():
    strip = _variant("flash_forward_tiled", "for j0 in range(0, Tk, block_k):",
                     "block_k = Tk\n        for j0 in range(0, Tk, block_k):")
    with pytest.raises(dl.check.ExerciseError, match="memory rule"):
        dl.check.flash_forward_tiled(strip)


def test_the_library_block_without_attention_biases_is_gradient_checked():
    block = dl.TransformerBlock(8, 2, causal=True, seed=0, attention_bias=False)
    assert "0.block.1.bq" not in block.params
    x = np.random.default_rng(0).standard_normal((2, 5, 8))
    assert dl.gradcheck(block, x, verbose=False) < 1e-6


def test_the_training_hook_gives_the_librarys_loss_curve(device):
    """The learner's four functions, plugged in, train the model along the library's curve, on
    either backend (the windows go to the model's device)."""
    ids = dl.data.load_text().train[:20_000]
    V = int(ids.max()) + 1
    kwargs = dict(T=16, batch_size=8, lr=3e-3, weight_decay=0.01, max_norm=1.0, seed=0)

    def model():
        return dl.Transformer(V, d_model=16, heads=2, layers=2, max_len=17, seed=0,
                              attention_bias=False).to(device)
    library = dl.train_language_model(model(), ids, 12, **kwargs)
    plugged = dl.PluggedTransformer(model(), attention=answers.mha_forward,
                                    block_backward=answers.transformer_block_backward)
    yours = dl.train_language_model(plugged, ids, 12, train_step=answers.train_step,
                                    lm_loss=answers.lm_loss, **kwargs)
    np.testing.assert_allclose(yours, library, rtol=1e-4)
    assert library[-1] < library[0]


def test_the_hook_refuses_a_model_with_attention_biases_and_attention_without_backward():
    with pytest.raises(ValueError, match="attention_bias=False"):
        dl.PluggedTransformer(dl.Transformer(5, 8, 2, 1, 4, seed=0),
                              block_backward=answers.transformer_block_backward)
    with pytest.raises(ValueError, match="block_backward"):
        dl.PluggedTransformer(dl.Transformer(5, 8, 2, 1, 4, seed=0, attention_bias=False),
                              attention=answers.mha_forward)
