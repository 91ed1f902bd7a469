"""dl.RNN, dl.LSTM and dl.RecurrentLM (issue 42, sequences before attention): shapes, gradient
checks in float64, parity with torch.nn.RNN / torch.nn.LSTM where PyTorch is installed, the
state carried between windows and where truncation cuts the gradient, saving and loading,
generation, ONNX export, the errors, and `dlcourse train --model lstm`. Each test runs on NumPy
and on CuPy (or its stand-in)."""
import numpy as np
import pytest

import dlcourse as dl
from dlcourse.layers import Layer

TOL = 1e-6
CELLS = {"rnn": dl.RNN, "lstm": dl.LSTM}


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def parts(state):
    """A layer's state as a tuple of arrays: (h,) for the RNN, (h, c) for the LSTM."""
    return state if isinstance(state, tuple) else (state,)


def host(state):
    return [dl.to_numpy(s) for s in parts(state)]


# --------------------------------------------------------------------------------------
# Shapes
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", CELLS)
def test_a_recurrent_layer_maps_n_t_d_to_every_hidden_state(kind, device, to_dev):
    layer = CELLS[kind](4, 6, seed=0).to(device)
    G = 4 if kind == "lstm" else 1
    assert {k: v.shape for k, v in layer.params.items()} == {"Wx": (4, 6 * G), "Wh": (6, 6 * G),
                                                             "b": (6 * G,)}
    x = to_dev(randn(3, 5, 4).astype(np.float32))
    out = layer.forward(x)
    assert out.shape == (3, 5, 6) and out.dtype == np.float32 and dl.device_of(out) == device
    assert [s.shape for s in parts(layer.state)] == [(3, 6)] * len(parts(layer.state))
    np.testing.assert_allclose(host(layer.state)[0], dl.to_numpy(out[:, -1]))   # h_T is the last
    dx = layer.backward(to_dev(randn(3, 5, 6).astype(np.float32)))
    assert dx.shape == x.shape and {k: g.shape for k, g in layer.grads.items()} == \
        {k: p.shape for k, p in layer.params.items()}
    assert [s.shape for s in parts(layer.dstate)] == [(3, 6)] * len(parts(layer.state))


def test_the_model_maps_ids_to_logits(device, to_dev):
    model = dl.RecurrentLM(11, 8, layers=2, seed=0).to(device)
    ids = to_dev(np.random.default_rng(0).integers(0, 11, (3, 7)))
    assert model.forward(ids).shape == (3, 7, 11)
    keys = [f"rnn.{i}.{k}" for i in (0, 1) for k in ("Wx", "Wh", "b")]
    assert sorted(model.params) == sorted(["embedding.W", "head.W", "head.b", *keys])
    assert len(model.state) == 2 and model.backward(to_dev(randn(3, 7, 11, seed=1))) is None


# --------------------------------------------------------------------------------------
# Gradient checks in float64
# --------------------------------------------------------------------------------------
class FromState(Layer):
    """A recurrent layer seen as a function of its start state (on a fixed x): its input is the
    state, h0 (N, H) or [h0, c0] side by side (N, 2H), its gradient ``dstate``."""

    def __init__(self, inner, x):
        super().__init__()
        self.inner, self.x = inner, x
        self.params = inner.params

    def map_arrays(self, fn):
        self.inner.map_arrays(fn)
        self.params, self.x = self.inner.params, fn(self.x)
        return self

    def forward(self, s):
        state = s if isinstance(self.inner, dl.RNN) else (s[:, :self.inner.hidden],
                                                          s[:, self.inner.hidden:])
        return self.inner.forward(self.x, state=state)

    def backward(self, dout):
        self.inner.backward(dout)
        self.grads = self.inner.grads
        xp = dl.get_array_module(dout)
        return xp.concatenate(parts(self.inner.dstate), axis=1)


@pytest.mark.parametrize("kind", CELLS)
def test_gradcheck_inputs_and_weights(kind, to_dev):
    err = dl.gradcheck(CELLS[kind](3, 5, seed=0), to_dev(randn(2, 6, 3)))
    assert err < TOL, f"{kind}: relative error {err:.2e}"


@pytest.mark.parametrize("kind", CELLS)
def test_gradcheck_the_start_state_and_weights_from_a_carried_state(kind, to_dev):
    G = 2 if kind == "lstm" else 1
    layer = FromState(CELLS[kind](3, 4, seed=1), to_dev(randn(2, 5, 3, seed=2)))
    err = dl.gradcheck(layer, to_dev(randn(2, 4 * G, seed=3)))
    assert err < TOL, f"{kind}: relative error {err:.2e}"


def test_gradcheck_catches_an_rnn_backward_that_forgets_the_recurrence(to_dev, capsys):
    """Backward through time is the point: treating h_{t-1} as a constant is wrong."""
    class NoTime(dl.RNN):
        def backward(self, dout, dstate=None):
            x, h0, hs = self.cache
            da = dout * (1 - hs * hs)
            xp = dl.get_array_module(dout)
            return self.weight_grads(x, xp.concatenate([h0[:, None], hs[:, :-1]], axis=1), da)
    assert dl.gradcheck(NoTime(3, 4, seed=0), to_dev(randn(2, 5, 3))) > 1e-2
    assert "analytic" in capsys.readouterr().out


# --------------------------------------------------------------------------------------
# Parity with PyTorch
# --------------------------------------------------------------------------------------
def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed: the parity tests "
                                               "compare with torch.nn.RNN and torch.nn.LSTM")


@pytest.mark.parametrize("kind", CELLS)
@pytest.mark.parametrize("with_state", [False, True], ids=["zeros", "given_state"])
def test_matches_pytorch_forward_and_backward(kind, with_state, device, to_dev):
    torch = _torch()
    N, T, D, H = 3, 6, 4, 5
    layer = CELLS[kind](D, H, seed=0).astype(np.float64).to(device)
    x, dout = randn(N, T, D, seed=1), randn(N, T, H, seed=2)
    state = [randn(N, H, seed=3 + i) for i in range(2 if kind == "lstm" else 1)] \
        if with_state else None
    given = None if state is None else (to_dev(state[0]) if kind == "rnn" else
                                        tuple(to_dev(s) for s in state))
    out = layer.forward(to_dev(x), state=given)
    dx = layer.backward(to_dev(dout))

    ref = (torch.nn.LSTM if kind == "lstm" else torch.nn.RNN)(D, H, batch_first=True,
                                                              dtype=torch.float64)
    p = {k: dl.to_numpy(v) for k, v in layer.params.items()}
    with torch.no_grad():
        ref.weight_ih_l0.copy_(torch.tensor(p["Wx"].T))
        ref.weight_hh_l0.copy_(torch.tensor(p["Wh"].T))
        ref.bias_ih_l0.copy_(torch.tensor(p["b"]) * 0.25)     # the two biases add up to b
        ref.bias_hh_l0.copy_(torch.tensor(p["b"]) * 0.75)
    tx = torch.tensor(x, requires_grad=True)
    t_state = None if state is None else [torch.tensor(s[None], requires_grad=True) for s in state]
    t_out, t_last = ref(tx, None if t_state is None else
                        (t_state[0] if kind == "rnn" else tuple(t_state)))
    t_out.backward(torch.tensor(dout))

    np.testing.assert_allclose(dl.to_numpy(out), t_out.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(host(layer.state), [s[0].detach().numpy() for s in parts(t_last)],
                               atol=1e-12)
    np.testing.assert_allclose(dl.to_numpy(dx), tx.grad.numpy(), atol=1e-12)
    g = {k: dl.to_numpy(v) for k, v in layer.grads.items()}
    np.testing.assert_allclose(g["Wx"], ref.weight_ih_l0.grad.numpy().T, atol=1e-12)
    np.testing.assert_allclose(g["Wh"], ref.weight_hh_l0.grad.numpy().T, atol=1e-12)
    np.testing.assert_allclose(g["b"], ref.bias_ih_l0.grad.numpy(), atol=1e-12)
    if state is not None:
        np.testing.assert_allclose(host(layer.dstate), [s.grad.numpy()[0] for s in t_state],
                                   atol=1e-12)


# --------------------------------------------------------------------------------------
# Windows: the carried state, and where truncation cuts the gradient
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", CELLS)
def test_a_state_carried_across_windows_equals_one_long_window(kind, device, to_dev):
    layer = CELLS[kind](3, 4, seed=0).astype(np.float64).to(device)
    x = to_dev(randn(2, 9, 3))
    long = dl.to_numpy(layer.forward(x))
    long_state = host(layer.state)
    layer.reset_state()
    assert layer.state is None
    pieces = [dl.to_numpy(layer.forward(x[:, a:b], state=layer.state))
              for a, b in ((0, 4), (4, 5), (5, 9))]
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), long, atol=1e-13)
    np.testing.assert_allclose(host(layer.state), long_state, atol=1e-13)


@pytest.mark.parametrize("kind", CELLS)
def test_truncation_cuts_the_gradient_at_the_window_start(kind, device, to_dev):
    """One window's backward gives the gradient with the carried state held constant: less
    than the long window's. The part cut off is exactly what the window's ``dstate`` carries
    back into the previous window."""
    layer = CELLS[kind](3, 4, seed=0).astype(np.float64).to(device)
    x, dout = to_dev(randn(2, 8, 3)), randn(2, 8, 4, seed=1)
    dout[:, :4] = 0                                    # the loss reads the second half only
    layer.forward(x)
    layer.backward(to_dev(dout))
    full = {k: dl.to_numpy(v) for k, v in layer.grads.items()}

    layer.forward(x[:, :4])
    first_state = layer.state
    layer.forward(x[:, 4:], state=first_state)
    layer.backward(to_dev(dout[:, 4:]))
    cut = {k: dl.to_numpy(v) for k, v in layer.grads.items()}
    carried = layer.dstate
    assert all(np.abs(s).max() > 1e-3 for s in host(carried))   # something was cut
    assert not np.allclose(cut["Wh"], full["Wh"], atol=1e-6)

    layer.forward(x[:, :4])                            # the first window, given what was cut
    layer.backward(to_dev(np.zeros((2, 4, 4))), dstate=carried)
    for k in full:
        np.testing.assert_allclose(cut[k] + dl.to_numpy(layer.grads[k]), full[k], atol=1e-12)


# --------------------------------------------------------------------------------------
# The model: training, saving, generating, exporting
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", CELLS)
def test_the_model_learns_a_repeating_text_with_fit(kind, device):
    text = "abcdabcdabcd" * 20
    data = dl.data.text_windows(np.array([ord(c) - 97 for c in text]), 8)
    model = dl.RecurrentLM(4, 16, layers=1, kind=kind, seed=0).to(device)
    history = dl.fit(model, dl.SequenceCrossEntropy(), dl.Adam(model, lr=2e-2), *data, epochs=8,
                     batch_size=16, progress=False, seed=0)
    assert history.train_loss[-1] < 0.3 * history.train_loss[0]


@pytest.mark.parametrize("kind", CELLS)
def test_save_and_load_rebuild_the_model_from_its_config(kind, tmp_path, device, to_dev):
    model = dl.RecurrentLM(5, 6, layers=2, kind=kind, seed=0, chars="abcde").to(device)
    path = dl.save(model, tmp_path / "rlm.npz") or tmp_path / "rlm.npz"
    loaded = dl.load(path)
    assert type(loaded) is dl.RecurrentLM and loaded.get_config() == model.get_config()
    ids = np.array([[0, 1, 2, 3, 4, 0]])
    np.testing.assert_array_equal(dl.to_numpy(loaded.forward(ids)),
                                  dl.to_numpy(model.forward(to_dev(ids))))
    layer = CELLS[kind](3, 4, seed=0)
    dl.save(layer, tmp_path / "layer.npz")
    x = randn(1, 2, 3).astype(np.float32)
    np.testing.assert_array_equal(dl.load(tmp_path / "layer.npz").forward(x), layer.forward(x))


def test_generate_carries_the_state_and_equals_rerunning_the_whole_context(device):
    model = dl.RecurrentLM(5, 8, layers=2, seed=0, chars="abcde").to(device)
    with_state = dl.generate(model, "abca", 40, seed=1)
    assert len(with_state) == 44 and with_state.startswith("abca")
    assert dl.generate(model, "abca", 40, seed=1, cache=False) == with_state
    assert model.generate("abca", 40, seed=1) == with_state


@pytest.mark.parametrize("kind", ["rnn", "lstm", "model"])
def test_onnx_export_matches_onnxruntime(kind, tmp_path):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    pytest.importorskip("onnx", reason="onnx is not installed")
    if kind == "model":
        model, x = dl.RecurrentLM(9, 6, layers=2, seed=0), np.array([[1, 2, 3, 4, 8], [0] * 5])
    else:
        model, x = CELLS[kind](3, 5, seed=0), randn(2, 7, 3).astype(np.float32)
    path = dl.export_onnx(model, tmp_path / "rec.onnx", input_shape=x.shape[1:])
    got = ort.InferenceSession(str(path)).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, model.forward(x), atol=1e-5)


# --------------------------------------------------------------------------------------
# Errors that speak to a learner
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("x, error, words", [
    (randn(5, 3), ValueError, "(N, T, D)"),                     # one sequence without batch
    (randn(2, 5, 4), ValueError, "last axis must be 3"),
    (np.ones((2, 5, 3), dtype=np.int64), TypeError, "floating-point"),
    (randn(2, 5, 3).astype(np.float32), TypeError, "float64 parameters"),
])
@pytest.mark.parametrize("kind", CELLS)
def test_bad_input_is_refused_saying_what_was_expected(kind, x, error, words):
    layer = CELLS[kind](3, 4).astype(np.float64)
    with pytest.raises(error, match=None) as info:
        layer.forward(x)
    assert words in str(info.value)


@pytest.mark.parametrize("kind", CELLS)
def test_a_state_of_another_batch_size_is_refused(kind):
    layer = CELLS[kind](3, 4)
    layer.forward(randn(5, 2, 3).astype(np.float32))
    with pytest.raises(ValueError, match="reset_state"):
        layer.forward(randn(2, 2, 3).astype(np.float32), state=layer.state)
    with pytest.raises(RuntimeError, match="forward"):
        CELLS[kind](3, 4).backward(np.zeros((1, 1, 4), np.float32))


def test_the_model_refuses_a_bad_kind_and_float_ids():
    with pytest.raises(ValueError, match="'lstm' or 'rnn'"):
        dl.RecurrentLM(5, 4, kind="gru")
    with pytest.raises(TypeError, match="integer token ids"):
        dl.RecurrentLM(5, 4).forward(np.zeros((1, 3)))


# --------------------------------------------------------------------------------------
# The command line, with tiny settings
# --------------------------------------------------------------------------------------
def test_dlcourse_train_lstm_on_text_runs_and_saves(tmp_path, capsys):
    from dlcourse.cli import main
    path = tmp_path / "lstm.npz"
    code = main(["train", "--model", "lstm", "--dataset", "text", "--epochs", "1",
                 "--d-model", "8", "--layers", "1", "--context", "8", "--batch-size", "512",
                 "--no-progress", "--save", str(path)])
    out = capsys.readouterr().out
    assert code == 0 and "validation loss" in out and "bigram" in out, out
    model = dl.load(path)
    assert type(model) is dl.RecurrentLM and model.kind == "lstm" and model.chars
    assert main(["generate", str(path), "--prompt", "def ", "--steps", "20"]) == 0
    assert capsys.readouterr().out.startswith("def ")


def test_the_lstm_options_are_checked_like_the_transformers(capsys):
    from dlcourse.cli import main
    with pytest.raises(SystemExit):
        main(["train", "--model", "lstm", "--heads", "2", "--dataset", "text"])
    assert "--heads (transformer only)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--model", "lstm"])
    assert "--model transformer with --dataset text (or --model lstm)" in capsys.readouterr().err
