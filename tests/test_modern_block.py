"""The modern block (issue 42; lessons 15-15b): dl.RMSNorm, dl.rope / dl.rope_backward,
dl.SwiGLU and TransformerBlock(norm="rms", pos="rope", mlp="swiglu"). Gradient checks in
float64 on every backend, parity with a PyTorch reference written here (and torch.nn.RMSNorm
where the installed torch has it), RoPE's relative-position property, the key/value cache,
save/load, ONNX export checked in onnxruntime, and the errors."""
import numpy as np
import pytest

import dlcourse as dl
from dlcourse.modern_block import rope_angles, swiglu_hidden

TOL = 1e-6


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def tokens(N, T, vocab, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, (N, T))


class RopeOf:
    """dl.rope as a layer (positions from ``start``), so dl.gradcheck can check rope_backward."""

    def __init__(self, start=0):
        self.start, self.params, self.grads = start, {}, {}

    def astype(self, dtype):
        return self

    def to(self, device):
        return self

    def forward(self, x):
        return dl.rope(x, self.start)

    def backward(self, dout):
        return dl.rope_backward(dout, self.start)


def modern(D=8, heads=2, **kw):
    return dict(norm="rms", pos="rope", mlp="swiglu", **kw)


# --------------------------------------------------------------------------------------
# Gradient checks, float64, both backends
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("layer, shape", [
    (lambda: dl.RMSNorm(6), (3, 4, 6)),
    (lambda: dl.RMSNorm(5, eps=1e-3), (7, 5)),
    (lambda: RopeOf(), (2, 3, 5, 6)),
    (lambda: RopeOf(start=7), (1, 2, 4, 8)),
    (lambda: dl.SwiGLU(6, 10), (2, 3, 6)),
    (lambda: dl.MultiHeadAttention(8, 2, causal=True, rope=True), (2, 5, 8)),
    (lambda: dl.TransformerBlock(8, 2, **modern()), (2, 5, 8)),
    (lambda: dl.TransformerBlock(8, 2, norm="rms"), (2, 4, 8)),
    (lambda: dl.TransformerBlock(8, 4, mlp="swiglu", attention_bias=False), (1, 6, 8)),
], ids=["rmsnorm", "rmsnorm-2d", "rope", "rope-start", "swiglu", "mha-rope", "block-modern",
        "block-rms", "block-swiglu"])
def test_layers_gradcheck(device, to_dev, layer, shape):
    built = layer().to(device)
    for k, p in built.params.items():                # g away from 1, biases away from 0
        if k.endswith(("g", "bq", "bk", "bv", "bo")):
            p[...] = p + to_dev(0.3 * randn(*p.shape, seed=len(k)).astype(p.dtype))
    assert dl.gradcheck(built, to_dev(randn(*shape))) < TOL


def test_the_modern_transformer_parameters_gradcheck(device, to_dev):
    model = dl.Transformer(11, 8, 2, 2, 9, seed=0, **modern()).astype(np.float64).to(device)
    idx = to_dev(tokens(2, 6, 11))
    out = model.forward(idx)
    R = to_dev(randn(*out.shape, seed=5))
    model.forward(idx)
    model.backward(R)
    xp = dl.get_array_module(out)
    worst = 0.0
    for key, p in model.params.items():
        flat = p.reshape(-1)
        picks = np.random.default_rng(len(key)).choice(flat.size, min(6, flat.size), replace=False)
        for i in picks:
            old = float(flat[i])
            flat[i] = old + 1e-6
            up = float((model.forward(idx) * R).sum())
            flat[i] = old - 1e-6
            down = float((model.forward(idx) * R).sum())
            flat[i] = old
            num, ana = (up - down) / 2e-6, float(model.grads[key].reshape(-1)[i])
            worst = max(worst, abs(num - ana) / max(abs(num) + abs(ana), 1e-8))
    assert xp is dl.get_array_module(model.grads["head.W"])
    assert worst < 1e-5, worst


# --------------------------------------------------------------------------------------
# PyTorch references, written here
# --------------------------------------------------------------------------------------
def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed: the parity tests "
                                               "compare with references written in torch")


def test_rmsnorm_matches_pytorch(device, to_dev):
    torch = _torch()
    x, dout, gain = randn(3, 4, 6), randn(3, 4, 6, seed=1), 1 + 0.3 * randn(6, seed=2)
    layer = dl.RMSNorm(6, eps=1e-6).astype(np.float64).to(device)
    layer.params["g"][...] = to_dev(gain)
    y = layer.forward(to_dev(x))
    dx = layer.backward(to_dev(dout))
    tx, tg = torch.tensor(x, requires_grad=True), torch.tensor(gain, requires_grad=True)
    ty = tg * tx * torch.rsqrt(tx.pow(2).mean(-1, keepdim=True) + 1e-6)    # the reference
    ty.backward(torch.tensor(dout))
    np.testing.assert_allclose(dl.to_numpy(y), ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dl.to_numpy(dx), tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dl.to_numpy(layer.grads["g"]), tg.grad.numpy(), rtol=1e-9)
    if not hasattr(torch.nn, "RMSNorm"):
        pytest.skip(f"torch {torch.__version__} has no torch.nn.RMSNorm (it came in 2.4)")
    ref = torch.nn.RMSNorm(6, eps=1e-6, dtype=torch.float64)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(gain))
    np.testing.assert_allclose(dl.to_numpy(y), ref(torch.tensor(x)).detach().numpy(),
                               rtol=1e-10, atol=1e-12)


def _torch_rope(torch, x, start=0, base=10000.0):
    """Meta's Llama reference: the pairs as complex numbers, times e^{i t θ}."""
    d, T = x.shape[-1], x.shape[-2]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    freqs = torch.polar(torch.ones(T, d // 2, dtype=torch.float64),
                        torch.outer(torch.arange(start, start + T, dtype=torch.float64), theta))
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2))
    return torch.view_as_real(xc * freqs).reshape(x.shape)


@pytest.mark.parametrize("start", [0, 5])
def test_rope_matches_pytorch(device, to_dev, start):
    torch = _torch()
    x, dout = randn(2, 3, 7, 8), randn(2, 3, 7, 8, seed=1)
    y = dl.rope(to_dev(x), start)
    dx = dl.rope_backward(to_dev(dout), start)
    tx = torch.tensor(x, requires_grad=True)
    ty = _torch_rope(torch, tx, start)
    ty.backward(torch.tensor(dout))
    np.testing.assert_allclose(dl.to_numpy(y), ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dl.to_numpy(dx), tx.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_swiglu_matches_pytorch(device, to_dev):
    torch = _torch()
    F = torch.nn.functional
    layer = dl.SwiGLU(6, 10, seed=3).astype(np.float64).to(device)
    x, dout = randn(2, 5, 6), randn(2, 5, 6, seed=1)
    y = layer.forward(to_dev(x))
    dx = layer.backward(to_dev(dout))
    tp = {k: torch.tensor(dl.to_numpy(v), requires_grad=True) for k, v in layer.params.items()}
    tx = torch.tensor(x, requires_grad=True)
    ty = (F.silu(tx @ tp["W_gate"]) * (tx @ tp["W_up"])) @ tp["W_down"]
    ty.backward(torch.tensor(dout))
    np.testing.assert_allclose(dl.to_numpy(y), ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dl.to_numpy(dx), tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    for k in tp:
        np.testing.assert_allclose(dl.to_numpy(layer.grads[k]), tp[k].grad.numpy(), rtol=1e-9,
                                   atol=1e-12)


# --------------------------------------------------------------------------------------
# RoPE's properties
# --------------------------------------------------------------------------------------
def test_rope_scores_depend_only_on_the_offset(device, to_dev):
    q, k = to_dev(randn(1, 1, 1, 16)), to_dev(randn(1, 1, 1, 16, seed=1))
    xp = dl.get_array_module(q)

    def score(m, n):                       # q at position m, k at position n
        return float((dl.rope(q, m) * dl.rope(k, n)).sum())
    for offset in (0, 1, 3, 10):
        scores = [score(m, m + offset) for m in (0, 4, 17, 100)]
        np.testing.assert_allclose(scores, scores[0], rtol=1e-9, atol=1e-12)
    assert abs(score(0, 1) - score(0, 5)) > 1e-3          # ... and does depend on it
    assert float(xp.abs(dl.rope(q, 0) - q).max()) == 0     # position 0: no turn
    x = to_dev(randn(2, 5, 8, seed=2))                     # a rotation: norms kept, undone
    np.testing.assert_allclose(dl.to_numpy(xp.linalg.norm(dl.rope(x, 3), axis=-1)),
                               dl.to_numpy(xp.linalg.norm(x, axis=-1)), rtol=1e-12)
    np.testing.assert_allclose(dl.to_numpy(dl.rope_backward(dl.rope(x, 3), 3)), dl.to_numpy(x),
                               atol=1e-12)


def test_rope_angles_are_position_times_theta():
    cos, sin = rope_angles(3, 4, start=2, base=100.0)
    theta = np.array([1.0, 100.0 ** -0.5])
    np.testing.assert_allclose(cos, np.cos(np.arange(2, 5)[:, None] * theta))
    np.testing.assert_allclose(sin, np.sin(np.arange(2, 5)[:, None] * theta))


# --------------------------------------------------------------------------------------
# The block and the model
# --------------------------------------------------------------------------------------
def test_the_swiglu_block_has_about_the_gelu_blocks_parameters():
    count = lambda layer: sum(p.size for p in layer.params.values())   # noqa: E731
    gelu, swiglu = dl.TransformerBlock(48, 4), dl.TransformerBlock(48, 4, **modern())
    assert swiglu_hidden(48, 4) == 128
    assert abs(count(swiglu) - count(gelu)) / count(gelu) < 0.02
    assert isinstance(swiglu.layers[0].block.layers[0], dl.RMSNorm)
    assert swiglu.attention.rope and not gelu.attention.rope


def test_defaults_are_unchanged_and_options_round_trip_through_save(device, tmp_path):
    plain = dl.Transformer(13, 8, 2, 1, 10, seed=4)
    assert set(plain.get_config()) == {"vocab", "d_model", "heads", "layers", "max_len",
                                       "causal", "mlp_ratio"}
    assert isinstance(plain.position, dl.PositionalEmbedding)
    model = dl.Transformer(13, 8, 2, 2, 10, seed=4, **modern()).to(device)
    assert model.get_config()["norm"] == "rms" and model.get_config()["mlp"] == "swiglu"
    assert isinstance(model.norm, dl.RMSNorm) and not any("position" in k for k in model.params)
    idx = dl.to_device(tokens(2, 7, 13), device)
    dl.save(model, tmp_path / "m.npz")
    back = dl.load(tmp_path / "m.npz").to(device)
    assert back.get_config() == model.get_config()
    np.testing.assert_array_equal(dl.to_numpy(back.forward(idx)), dl.to_numpy(model.forward(idx)))
    block = dl.TransformerBlock(8, 2, pos="rope")
    assert block.get_config()["pos"] == "rope" and "norm" not in block.get_config()


def test_the_key_value_cache_gives_the_forward_logits_with_rope(device):
    model = dl.Transformer(13, 8, 2, 2, 12, seed=1, **modern()).astype(np.float64).to(device)
    idx = dl.to_device(tokens(2, 9, 13), device)
    full = dl.to_numpy(model.forward(idx))
    a, past = model.step(idx[:, :4])
    b, past = model.step(idx[:, 4:5], past)
    c, _ = model.step(idx[:, 5:], past)
    steps = np.concatenate([dl.to_numpy(t) for t in (a, b, c)], axis=1)
    np.testing.assert_allclose(steps, full, atol=1e-12)
    ids = dl.generate(model, tokens(1, 3, 13)[0], 12, seed=0)
    assert np.array_equal(ids, dl.generate(model, tokens(1, 3, 13)[0], 12, seed=0, cache=False))


def test_a_modern_model_learns_with_fit():
    X = np.tile(np.arange(8), (16, 1)) % 5
    model = dl.Transformer(5, 16, 2, 1, 8, seed=0, **modern())
    hist = dl.fit(model, dl.SequenceCrossEntropy(), dl.Adam(model, lr=1e-2), X[:, :-1], X[:, 1:],
                  epochs=30, batch_size=16, progress=False)
    assert hist.train_loss[-1] < 0.5 * hist.train_loss[0]


def test_wrong_options_say_what_is_expected():
    with pytest.raises(ValueError, match=r"norm='batch'.*'layer' or 'rms'"):
        dl.TransformerBlock(8, 2, norm="batch")
    with pytest.raises(ValueError, match=r"pos='alibi'.*'learned' or 'rope'"):
        dl.Transformer(5, 8, 2, 1, 8, pos="alibi")
    with pytest.raises(ValueError, match="d_model / heads must be even"):
        dl.MultiHeadAttention(6, 2, rope=True)
    with pytest.raises(ValueError, match="must be even"):
        dl.rope(np.zeros((2, 3, 5)))
    with pytest.raises(ValueError, match="whole number >= 0"):
        dl.rope(np.zeros((2, 3, 4)), start=-1)
    with pytest.raises(ValueError, match=r"RMSNorm\(d=4\).*LAST axis"):
        dl.RMSNorm(4).forward(np.zeros((2, 5), np.float32))


# --------------------------------------------------------------------------------------
# ONNX
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("options", [modern(), dict(pos="rope"), dict(norm="rms", mlp="swiglu")],
                         ids=["modern", "rope", "rms-swiglu"])
def test_the_modern_transformer_exports_to_onnx_and_onnxruntime_agrees(tmp_path, options):
    pytest.importorskip("onnx", reason="export needs onnx: pip install -e '.[serve]'")
    ort = pytest.importorskip("onnxruntime", reason="the check runs the file in onnxruntime")
    model = dl.Transformer(13, 16, 2, 2, 12, seed=2, **options)
    path = dl.export_onnx(model, tmp_path / "modern.onnx", input_shape=(9,))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    idx = tokens(3, 9, 13, seed=9)
    got = session.run(None, {"input": idx})[0]
    np.testing.assert_allclose(got, model.forward(idx), rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------------
# Top-p (nucleus) sampling in dl.generate
# --------------------------------------------------------------------------------------
def test_the_nucleus_is_the_smallest_set_that_reaches_p():
    from dlcourse.generate import nucleus
    p = np.array([[0.5, 0.25, 0.125, 0.125], [0.25, 0.5, 0.125, 0.125]])
    kept = lambda top_p: [set(np.flatnonzero(row)) for row in nucleus(p, top_p)]  # noqa: E731
    assert kept(0.5) == [{0}, {1}]                        # the likeliest alone reaches 0.5
    assert kept(0.7) == [{0, 1}, {0, 1}] == kept(0.75)    # 0.75 is reached with two
    assert kept(0.76) == [{0, 1, 2}, {0, 1, 2}]           # a tie (0.125, 0.125): the smaller id
    assert kept(0.01) == [{0}, {1}]                       # never empty
    np.testing.assert_allclose(nucleus(p, 0.7)[0], [2 / 3, 1 / 3, 0, 0])   # renormalized


def test_top_p_draws_only_from_the_nucleus_in_its_proportions():
    from dlcourse.generate import sample_next
    logits = np.log(np.tile([[0.5, 0.25, 0.125, 0.125]], (20000, 1)))
    ids = sample_next(logits, 1.0, None, np.random.default_rng(0), top_p=0.7)
    assert set(ids.tolist()) == {0, 1}
    assert abs((ids == 0).mean() - 2 / 3) < 0.02


def test_top_p_of_one_is_plain_sampling_and_the_cache_does_not_change_it(device):
    model = dl.Transformer(13, 8, 2, 1, 12, seed=1).to(device)
    prompt = tokens(2, 3, 13)
    plain = dl.generate(model, prompt, 20, seed=3)
    assert np.array_equal(plain, dl.generate(model, prompt, 20, seed=3, top_p=1.0))
    assert np.array_equal(plain, model.generate(prompt, 20, seed=3, top_p=1))
    a = dl.generate(model, prompt, 20, seed=3, top_p=0.6, top_k=5, temperature=0.9)
    b = dl.generate(model, prompt, 20, seed=3, top_p=0.6, top_k=5, temperature=0.9, cache=False)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("top_p, error", [(0, ValueError), (1.5, ValueError), (-0.1, ValueError),
                                          (float("nan"), ValueError), ("0.9", TypeError)])
def test_top_p_outside_zero_one_is_refused(top_p, error):
    model = dl.Transformer(13, 8, 2, 1, 12, seed=1)
    with pytest.raises(error, match=r"top_p.*top_p=0\.9"):
        dl.generate(model, tokens(1, 3, 13), 2, top_p=top_p)


def test_dlcourse_generate_takes_top_p(tmp_path, capsys):
    from dlcourse import cli
    chars = "abcdefgh "
    path = tmp_path / "char.npz"
    dl.save(dl.Transformer(len(chars), 8, 2, 1, 16, seed=0, chars=chars), path)
    assert cli.main(["generate", str(path), "--prompt", "ab", "--steps", "5", "--top-p",
                     "0.9"]) == 0
    assert capsys.readouterr().out.startswith("ab")
    with pytest.raises(SystemExit):
        cli.main(["generate", str(path), "--top-p", "1.5"])
    assert "expected a number in (0, 1], got 1.5" in capsys.readouterr().err
