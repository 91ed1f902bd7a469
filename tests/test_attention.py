"""Notebook 15's library part: dl.attention (forward and hand-written backward), the
multi-head layer, Embedding, PositionalEmbedding, GELU, the pre-LayerNorm block and the small
Transformer: gradient checks in float64, parity with PyTorch where it is installed, the
key/value cache, training with dl.fit, saving and loading, export to ONNX, and the errors.
Each test runs on NumPy and on CuPy (or its stand-in)."""
import copy

import numpy as np
import pytest

import dlcourse as dl
from dlcourse.attention import attention_backward, attention_forward, causal_mask
from dlcourse.transformer import gelu

TOL = 1e-6


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def tokens(N, T, vocab, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, (N, T))


class AttentionOf:
    """dl.attention as a layer of x = stack(q, k, v) (3, N, H, T, d), so dl.gradcheck can
    perturb q, k and v (Tq = Tk here; the key/value cache's Tq < Tk is checked against
    PyTorch and the flash version)."""

    def __init__(self, mask=None, causal=False):
        self.mask, self.causal, self.params, self.grads = mask, causal, {}, {}

    def astype(self, dtype):
        return self

    def to(self, device):
        if self.mask is not None:
            self.mask = dl.to_device(dl.to_numpy(self.mask), device)
        return self

    def forward(self, x):
        out, self.cache = attention_forward(x[0], x[1], x[2], self.mask, self.causal)
        return out

    def backward(self, dout):
        return get_xp(dout).stack(attention_backward(dout, self.cache))


def get_xp(a):
    return dl.get_array_module(a)


MASK = np.random.default_rng(7).random((2, 1, 5, 5)) > 0.4      # broadcast over the heads
MASK[:, :, :, 0] = True                                          # every row keeps a key


# --------------------------------------------------------------------------------------
# Gradient checks, float64, both backends
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("mask, causal", [(None, False), (None, True), (MASK, False), (MASK, True)],
                         ids=["plain", "causal", "mask", "mask+causal"])
def test_attention_backward_gradcheck(device, to_dev, mask, causal):
    x = to_dev(randn(3, 2, 3, 5, 4))
    m = None if mask is None else to_dev(mask)
    assert dl.gradcheck(AttentionOf(m, causal), x) < TOL


def test_a_fully_masked_row_gives_zeros_not_nan(device, to_dev):
    q, k, v = to_dev(*randn(3, 1, 1, 3, 4))
    mask = to_dev(np.array([[True, False, True], [False, False, False], [True, True, True]]))
    out, cache = attention_forward(q, k, v, mask)
    assert bool(get_xp(out).isfinite(out).all()) and float(abs(out[0, 0, 1]).max()) == 0
    for g in attention_backward(get_xp(out).ones_like(out), cache):
        assert bool(get_xp(g).isfinite(g).all())


def test_a_float_mask_of_zeros_and_minus_inf_equals_the_bool_mask(device, to_dev):
    """PyTorch's two conventions: bool True = attend; float 0 = keep, -inf = drop (added)."""
    q, k, v = to_dev(*randn(3, 2, 3, 5, 4))
    additive = to_dev(np.where(MASK, 0.0, -np.inf))
    want = attention_forward(q, k, v, to_dev(MASK), causal=True)[0]
    got = attention_forward(q, k, v, additive, causal=True)[0]
    np.testing.assert_allclose(dl.to_numpy(got), dl.to_numpy(want), atol=1e-12)
    # and a finite float mask shifts the scores: the softmax of (q k^T / sqrt(d) + mask)
    shift = randn(5, 5, seed=3)
    S = dl.to_numpy(q @ k.swapaxes(-1, -2)) / 2 + shift
    P = np.exp(S - S.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    got = dl.attention(q, k, v, mask=to_dev(shift))
    np.testing.assert_allclose(dl.to_numpy(got), P @ dl.to_numpy(v), atol=1e-12)
    layer = dl.MultiHeadAttention(8, 2, dtype=np.float64, seed=0).to(device)
    x = to_dev(randn(2, 5, 8))
    np.testing.assert_allclose(dl.to_numpy(layer.forward(x, additive)),
                               dl.to_numpy(layer.forward(x, to_dev(MASK))), atol=1e-12)


def test_a_float_mask_passes_the_gradient_check(device, to_dev):
    x = to_dev(randn(3, 2, 3, 5, 4))
    mask = to_dev(np.where(MASK, randn(2, 1, 5, 5, seed=4), -np.inf))
    assert dl.gradcheck(AttentionOf(mask, causal=True), x) < TOL


@pytest.mark.parametrize("mask, error, words", [
    (np.ones((1, 2, 1, 5, 5), bool), ValueError, r"\(1, 2, 1, 5, 5\) does not broadcast.*"
                                                 r"without adding axes"),
    (np.ones((5, 4), bool), ValueError, r"\(5, 4\) does not broadcast to .* \(2, 3, 5, 5\)"),
    ([[True] * 5] * 5, TypeError, r"got a list\. .*np\.array\(mask, dtype=bool\)"),
    (np.ones((5, 5), np.int64), TypeError, r"dtype int64\. .*mask\.astype\(bool\)"),
    (np.full((5, 5), np.nan), ValueError, "NaN or \\+inf"),
], ids=["an extra axis", "wrong Tk", "a nested list", "integers", "NaN"])
def test_masks_that_are_not_pytorchs_conventions_are_refused(device, to_dev, mask, error, words):
    q, k, v = to_dev(*randn(3, 2, 3, 5, 4))
    if isinstance(mask, np.ndarray):
        mask = to_dev(mask)
    with pytest.raises(error, match=words):
        dl.attention(q, k, v, mask=mask)
    layer = dl.MultiHeadAttention(6, 3).to(device)
    with pytest.raises(error, match=words):
        layer.forward(to_dev(randn(2, 5, 6).astype(np.float32)), mask)


def test_no_keys_at_all_gives_zeros_as_flash_attention_does(device, to_dev):
    q = to_dev(randn(2, 3, 4, 5))
    k = v = to_dev(np.zeros((2, 3, 0, 5)))
    out, cache = attention_forward(q, k, v)
    flash = dl.flash_attention(q, k, v)
    assert out.shape == flash.shape == q.shape
    assert float(abs(out).max()) == 0 and float(abs(flash).max()) == 0
    dq, dk, dv = attention_backward(get_xp(q).ones_like(q), cache)
    assert dq.shape == q.shape and dk.shape == dv.shape == k.shape
    assert float(abs(dq).max()) == 0


@pytest.mark.parametrize("layer, shape", [
    (lambda: dl.MultiHeadAttention(8, 2), (2, 5, 8)),
    (lambda: dl.MultiHeadAttention(12, 3, causal=True), (2, 4, 12)),
    (lambda: dl.GELU(), (3, 4, 5)),
    (lambda: dl.PositionalEmbedding(9, 6), (2, 5, 6)),
    (lambda: dl.FeedForward(6, 10), (2, 3, 6)),
    (lambda: dl.TransformerBlock(8, 2), (2, 5, 8)),
    (lambda: dl.TransformerBlock(8, 4, causal=False, mlp_ratio=2), (1, 6, 8)),
], ids=["mha", "mha-causal", "gelu", "positions", "feedforward", "block", "block-full"])
def test_layers_gradcheck(device, to_dev, layer, shape):
    built = layer().to(device)
    for k, p in built.params.items():               # biases and LayerNorm's affine away from 0, 1
        if k.endswith(("b", "bq", "bk", "bv", "bo", "beta", "gamma")):
            p[...] = p + to_dev(0.3 * randn(*p.shape, seed=len(k)).astype(p.dtype))
    assert dl.gradcheck(built, to_dev(randn(*shape))) < TOL


def numerical_param_check(model, idx, device, entries=12, eps=1e-6):
    """dl.gradcheck's comparison for a model of integer ids (which it would turn into floats):
    L = sum(model(idx) * R), every parameter's analytic gradient against central differences
    at ``entries`` random entries. Returns the largest relative error."""
    m = copy.deepcopy(model).astype(np.float64).to(device)
    out = m.forward(idx)
    xp = get_xp(out)
    R = xp.asarray(randn(*out.shape, seed=5))
    m.forward(idx)
    assert m.backward(R) is None
    gen, worst = np.random.default_rng(0), 0.0
    for key, p in m.params.items():
        flat, ana = p.reshape(-1), dl.to_numpy(m.grads[key]).reshape(-1)
        pick = gen.choice(flat.size, min(entries, flat.size), replace=False)
        if key == "embedding.W":        # rows of ids that occur, where the gradient lives
            used = np.unique(dl.to_numpy(idx))
            pick = used[:entries] * p.shape[1] + gen.integers(0, p.shape[1], min(entries, len(used)))
        num = []
        for i in pick:
            old = float(flat[i])
            flat[i] = old + eps
            plus = float((m.forward(idx) * R).sum())
            flat[i] = old - eps
            minus = float((m.forward(idx) * R).sum())
            flat[i] = old
            num.append((plus - minus) / (2 * eps))
        a, n = ana[pick], np.array(num)
        if max(np.abs(a).max(), np.abs(n).max()) < 1e-8:
            continue        # zero both ways, as bk's: a key bias shifts a row's scores alike
        err = np.linalg.norm(a - n) / max(np.linalg.norm(a) + np.linalg.norm(n), 1e-12)
        assert err < TOL, (key, a, n)
        worst = max(worst, err)
    return worst


def test_embedding_gradient_adds_repeated_ids(device, to_dev):
    emb = dl.Embedding(5, 3).to(device)
    idx = to_dev(np.array([[1, 1, 4], [1, 0, 4]]))
    out = emb.forward(idx)
    assert out.shape == (2, 3, 3)
    np.testing.assert_array_equal(dl.to_numpy(out[0, 2]), dl.to_numpy(emb.params["W"][4]))
    dout = to_dev(np.arange(18, dtype=np.float32).reshape(2, 3, 3))
    assert emb.backward(dout) is None
    dW = dl.to_numpy(emb.grads["W"])
    d = dl.to_numpy(dout)
    np.testing.assert_allclose(dW[1], d[0, 0] + d[0, 1] + d[1, 0])    # id 1, three times
    np.testing.assert_allclose(dW[4], d[0, 2] + d[1, 2])
    np.testing.assert_allclose(dW[[2, 3]], 0)


def test_transformer_gradients_by_finite_differences(device, to_dev):
    model = dl.Transformer(vocab=7, d_model=8, heads=2, layers=2, max_len=6, seed=0)
    for k, p in model.params.items():
        if k.endswith(("b", "beta", "gamma")):
            p[...] += 0.3 * randn(*p.shape, seed=len(k)).astype(p.dtype)
    assert numerical_param_check(model, to_dev(tokens(2, 5, 7)), device) < TOL


# --------------------------------------------------------------------------------------
# PyTorch parity
# --------------------------------------------------------------------------------------
def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed: the parity tests "
                                               "compare with torch.nn.functional's attention")


@pytest.mark.parametrize("Tq, Tk, causal, masked", [(5, 5, False, False), (5, 5, True, False),
                                                    (4, 6, False, True), (6, 6, True, True)],
                         ids=["plain", "causal", "mask", "mask+causal"])
def test_attention_matches_pytorch_forward_and_backward(device, to_dev, Tq, Tk, causal, masked):
    torch = _torch()
    F = torch.nn.functional
    q, k, v = randn(2, 3, Tq, 4, seed=1), randn(2, 3, Tk, 4, seed=2), randn(2, 3, Tk, 4, seed=3)
    dout = randn(2, 3, Tq, 4, seed=4)
    mask = np.random.default_rng(8).random((2, 1, Tq, Tk)) > 0.3 if masked else None
    if masked:
        mask[..., 0] = True                         # PyTorch gives NaN for a row with no key
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    t_mask = None if mask is None else torch.tensor(mask)
    if causal and masked:                           # PyTorch takes one or the other: combine
        t_mask = t_mask & torch.ones(Tq, Tk, dtype=torch.bool).tril()
        t_out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=t_mask)
    else:
        t_out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=t_mask, is_causal=causal)
    t_out.backward(torch.tensor(dout))
    out, cache = attention_forward(*to_dev(q, k, v), None if mask is None else to_dev(mask), causal)
    np.testing.assert_allclose(dl.to_numpy(out), t_out.detach().numpy(), atol=1e-12)
    for name, got, t in zip("qkv", attention_backward(to_dev(dout), cache), (tq, tk, tv)):
        np.testing.assert_allclose(dl.to_numpy(got), t.grad.numpy(), atol=1e-12, err_msg=f"d{name}")


@pytest.mark.parametrize("shape", [(2, 1, 5, 5), (5, 5), (2, 3, 1, 5)],
                         ids=["N,1,Tq,Tk", "Tq,Tk", "N,H,1,Tk"])
def test_a_float_mask_is_added_to_the_scores_as_pytorch_does(device, to_dev, shape):
    torch = _torch()
    F = torch.nn.functional
    q, k, v = randn(3, 2, 3, 5, 4, seed=5)
    dout = randn(2, 3, 5, 4, seed=6)
    gen = np.random.default_rng(9)
    mask = np.where(gen.random(shape) > 0.4, 0.0, -np.inf) + gen.standard_normal(shape)
    mask[..., 0] = 0.0                              # PyTorch gives NaN for a row with no key
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    t_out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.tensor(mask))
    t_out.backward(torch.tensor(dout))
    out, cache = attention_forward(*to_dev(q, k, v), to_dev(mask))
    np.testing.assert_allclose(dl.to_numpy(out), t_out.detach().numpy(), atol=1e-12)
    for name, got, t in zip("qkv", attention_backward(to_dev(dout), cache), (tq, tk, tv)):
        np.testing.assert_allclose(dl.to_numpy(got), t.grad.numpy(), atol=1e-12, err_msg=f"d{name}")


def test_causal_mask_is_pytorchs_when_tq_equals_tk_and_bottom_right_for_a_cache():
    torch = _torch()
    np.testing.assert_array_equal(causal_mask(5, 5), torch.ones(5, 5, dtype=torch.bool).tril().numpy())
    np.testing.assert_array_equal(causal_mask(2, 4), [[1, 1, 1, 0], [1, 1, 1, 1]])


def test_gelu_matches_pytorchs_tanh_gelu(device, to_dev):
    torch = _torch()
    x = randn(4, 7, seed=2) * 3
    t = torch.tensor(x, requires_grad=True)
    ty = torch.nn.GELU(approximate="tanh")(t)
    dout = randn(4, 7, seed=3)
    ty.backward(torch.tensor(dout))
    layer = dl.GELU()
    y = layer.forward(to_dev(x))
    np.testing.assert_allclose(dl.to_numpy(y), ty.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(dl.to_numpy(gelu(to_dev(x))), ty.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(dl.to_numpy(layer.backward(to_dev(dout))), t.grad.numpy(), atol=1e-12)


def test_multi_head_attention_matches_pytorchs(device, to_dev):
    """nn.MultiheadAttention stores W (out, in) and packs Q, K, V's in one in_proj matrix."""
    torch = _torch()
    D, H = 8, 2
    mha = dl.MultiHeadAttention(D, H, causal=True, seed=3).astype(np.float64)
    p = {k: v + 0.1 * randn(*v.shape, seed=i) for i, (k, v) in enumerate(mha.params.items())}
    mha.params.update(p)
    ref = torch.nn.MultiheadAttention(D, H, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.tensor(np.concatenate([p["Wq"].T, p["Wk"].T, p["Wv"].T])))
        ref.in_proj_bias.copy_(torch.tensor(np.concatenate([p["bq"], p["bk"], p["bv"]])))
        ref.out_proj.weight.copy_(torch.tensor(p["Wo"].T))
        ref.out_proj.bias.copy_(torch.tensor(p["bo"]))
    x = randn(2, 5, D, seed=9)
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)          # PyTorch's: True = masked
    want, _ = ref(*(torch.tensor(x),) * 3, attn_mask=causal, need_weights=False)
    got = mha.to(device).forward(to_dev(x))
    np.testing.assert_allclose(dl.to_numpy(got), want.detach().numpy(), atol=1e-12)


# --------------------------------------------------------------------------------------
# The model: shapes, causality, the key/value cache, training, saving, export
# --------------------------------------------------------------------------------------
def test_transformer_shapes_keys_and_causality(device, to_dev):
    model = dl.Transformer(vocab=11, d_model=16, heads=4, layers=2, max_len=12, seed=0).to(device)
    idx = tokens(3, 10, 11)
    logits = model.forward(to_dev(idx))
    assert logits.shape == (3, 10, 11) and logits.dtype == np.float32
    assert {"embedding.W", "position.W", "blocks.0.0.block.1.Wq", "blocks.1.1.block.1.fc2.W",
            "norm.gamma", "head.W"} <= set(model.params)
    changed = idx.copy()
    changed[:, 6] = (changed[:, 6] + 1) % 11                   # the future must not matter
    after = dl.to_numpy(model.forward(to_dev(changed)))
    np.testing.assert_allclose(after[:, :6], dl.to_numpy(logits)[:, :6], atol=1e-5)
    assert np.abs(after[:, 6:] - dl.to_numpy(logits)[:, 6:]).max() > 1e-4


def test_step_with_a_key_value_cache_equals_the_full_forward(device, to_dev):
    model = dl.Transformer(vocab=9, d_model=8, heads=2, layers=2, max_len=10, seed=1)
    model.astype(np.float64).to(device)
    idx = to_dev(tokens(2, 9, 9, seed=3))
    want = dl.to_numpy(model.forward(idx))
    logits, past = model.step(idx[:, :4])
    parts = [logits]
    for t in range(4, 9):                            # then one token at a time
        logits, past = model.step(idx[:, t:t + 1], past)
        parts.append(logits)
    assert len(past) == 2 and past[0][0].shape == (2, 2, 9, 4)
    np.testing.assert_allclose(np.concatenate([dl.to_numpy(p) for p in parts], axis=1), want,
                               atol=1e-12)


def test_a_tiny_transformer_learns_with_fit(device):
    """Sequences that repeat a short pattern: after a few epochs the next token is nearly
    certain, far below the uniform guess's log(vocab)."""
    dl.manual_seed(0)
    period, vocab, T = 3, 6, 12
    starts = np.random.default_rng(0).integers(0, period, 256)
    pattern = np.array([1, 4, 2])
    seqs = pattern[(starts[:, None] + np.arange(T + 1)) % period]
    X, Y = seqs[:, :-1], seqs[:, 1:]
    model = dl.Transformer(vocab, 16, 2, 1, T, seed=0).to(device)
    loss = dl.SequenceCrossEntropy()
    history = dl.fit(model, loss, dl.Adam(model, lr=1e-2), X, Y, epochs=8, batch_size=32,
                     seed=0, progress=False, validation=(X[:64], Y[:64]))
    assert history.val_loss[-1] < 0.25 * np.log(vocab), history.val_loss
    assert history.val_accuracy[-1] is None           # per-position accuracy is not fit's


def test_save_and_load_rebuild_a_transformer(tmp_path, device, to_dev):
    model = dl.Transformer(vocab=13, d_model=8, heads=2, layers=2, max_len=7, mlp_ratio=2,
                           seed=4).to(device)
    model.params["head.b"][...] += 0.5
    path = dl.save(model, tmp_path / "tiny.npz")
    back = dl.load(path)
    assert type(back) is dl.Transformer and back.get_config() == model.get_config()
    idx = tokens(2, 7, 13)
    np.testing.assert_array_equal(dl.to_numpy(back.to(device).forward(to_dev(idx))),
                                  dl.to_numpy(model.forward(to_dev(idx))))


@pytest.mark.parametrize("causal, attention_bias", [(True, True), (False, True), (True, False)])
def test_transformer_exports_to_onnx_and_onnxruntime_agrees(tmp_path, causal, attention_bias):
    pytest.importorskip("onnx", reason="export needs onnx: pip install -e '.[serve]'")
    ort = pytest.importorskip("onnxruntime", reason="the check runs the file in onnxruntime")
    model = dl.Transformer(vocab=17, d_model=16, heads=4, layers=2, max_len=12, causal=causal,
                           seed=2, attention_bias=attention_bias)   # False: lesson 15b's model
    for k, p in model.params.items():
        if k.endswith(("b", "beta", "gamma")):
            p[...] += 0.3 * randn(*p.shape, seed=len(k)).astype(p.dtype)
    path = dl.export_onnx(model, tmp_path / "transformer.onnx", input_shape=(9,))
    import onnx
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert {"Gather", "MatMul", "Softmax", "LayerNormalization", "Add", "Tanh"} <= ops
    assert ("Trilu" in ops) == causal
    idx = tokens(5, 9, 17, seed=1)
    got = ort.InferenceSession(str(path)).run(None, {"input": idx})[0]
    np.testing.assert_allclose(got, model.forward(idx), atol=1e-4, rtol=1e-4)


# --------------------------------------------------------------------------------------
# Errors that speak to a learner
# --------------------------------------------------------------------------------------
def test_the_errors_name_the_fix():
    with pytest.raises(ValueError, match="multiple of heads"):
        dl.MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match=r"last axis must be 8"):
        dl.MultiHeadAttention(8, 2).forward(np.zeros((2, 3, 6), np.float32))
    with pytest.raises(ValueError, match=r"\(N, heads, T, d\)"):
        dl.attention(np.zeros((3, 4)), np.zeros((3, 4)), np.zeros((3, 4)))
    with pytest.raises(ValueError, match="does not broadcast"):
        dl.attention(*np.zeros((3, 1, 1, 3, 2)), mask=np.ones((2, 2), bool))
    model = dl.Transformer(5, 8, 2, 1, max_len=4)
    with pytest.raises(TypeError, match="integer token ids"):
        model.forward(np.zeros((1, 3), np.float32))
    with pytest.raises(ValueError, match="max_len=4"):
        model.forward(np.zeros((1, 6), np.int64))
    with pytest.raises(ValueError, match=r"in \[0, 4\]"):
        model.forward(np.full((1, 3), 5))
    with pytest.raises(ValueError, match=r"batch axis: ids\[None\]"):
        model.forward(np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="dl.SoftmaxCrossEntropy"):
        dl.SequenceCrossEntropy().forward(np.zeros((4, 5), np.float32), np.zeros(4, np.int64))
