"""The multiclass hinge loss (CS231n's multiclass SVM loss, lesson 02b): ``dl.MulticlassHingeLoss``
on every backend (values, gradient checks, its sparse gradient, training with ``dl.fit``, parity
with ``torch.nn.MultiMarginLoss``, errors), and the lesson's check ``dl.check.hinge_grad``: a right
answer passes and each common wrong answer gets the message that names its mistake."""
import numpy as np
import pytest

import dlcourse as dl
from dlcourse.check import ExerciseError

# CS231n's example (one sample per row): the terms are 2.9 | 0 | 6.3 + 6.6, mean 15.8 / 3
SCORES = np.array([[3.2, 5.1, -1.7], [1.3, 4.9, 2.0], [2.2, 2.5, -3.1]])
LABELS = np.array([0, 1, 2])


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# --------------------------------------------------------------------------------------
# The loss: values, gradient, sparsity
# --------------------------------------------------------------------------------------
def test_value_and_gradient_on_the_hand_example(to_dev, device):
    loss = dl.MulticlassHingeLoss()
    value = loss.forward(*to_dev(SCORES, LABELS))
    assert isinstance(value, float) and abs(value - 15.8 / 3) < 1e-12
    grad = loss.backward()
    assert dl.backend.device_of(grad) == device
    expected = np.array([[-1, 1, 0], [0, 0, 0], [1, 1, -2]]) / 3   # row 2: both wrong classes
    np.testing.assert_allclose(dl.to_numpy(grad), expected, atol=1e-15)


def test_the_margin_argument_and_the_tie_convention(to_dev):
    # s_j - s_y + margin is exactly 0 for j = 1 (met: gradient 0) and 2 for j = 3 (violated)
    scores, labels = to_dev(np.array([[2.0, 1.0, 0.0, 3.0]]), np.array([0]))
    loss = dl.MulticlassHingeLoss(margin=1.0)
    assert loss.forward(scores, labels) == 2.0
    np.testing.assert_array_equal(dl.to_numpy(loss.backward()), [[-1.0, 0.0, 0.0, 1.0]])
    loss = dl.MulticlassHingeLoss(margin=3.0)        # every wrong class inside the margin now
    assert loss.forward(scores, labels) == 2.0 + 1.0 + 4.0
    np.testing.assert_array_equal(dl.to_numpy(loss.backward()), [[-3.0, 1.0, 1.0, 1.0]])


@pytest.mark.parametrize("margin", [1.0, 0.3])
def test_gradcheck_float64(margin, to_dev):
    scores, labels = randn(6, 4), np.array([0, 3, 2, 1, 1, 0])
    err = dl.gradcheck(dl.MulticlassHingeLoss(margin), to_dev(scores), to_dev(labels))
    assert err < 1e-6, f"relative error {err:.2e}"


def test_the_gradient_is_zero_where_every_margin_is_met(to_dev, xp):
    """A sample whose right score leads every other by more than the margin passes no gradient;
    a row that violates has nonzero entries at the violators and at its label only."""
    scores = randn(5, 4, seed=1)
    labels = np.array([0, 1, 2, 3, 0])
    scores[[0, 2, 3], labels[[0, 2, 3]]] += 10.0        # rows 0, 2, 3: margins met
    loss = dl.MulticlassHingeLoss()
    loss.forward(*to_dev(scores, labels))
    grad = dl.to_numpy(loss.backward())
    assert not grad[[0, 2, 3]].any()
    for n in (1, 4):
        violators = scores[n] - scores[n, labels[n]] + 1 > 0
        violators[labels[n]] = False
        assert violators.any()
        np.testing.assert_array_equal(grad[n] != 0, violators | (np.arange(4) == labels[n]))
        assert grad[n].sum() == pytest.approx(0.0, abs=1e-15)   # +1 per violator, -count at y


def test_float32_stays_float32(to_dev):
    loss = dl.MulticlassHingeLoss()
    loss.forward(*to_dev(SCORES.astype(np.float32), LABELS))
    assert loss.backward().dtype == np.float32


# --------------------------------------------------------------------------------------
# Training with it: fit and evaluate treat it as a classification loss
# --------------------------------------------------------------------------------------
def _three_blobs(n_per_class=60, seed=0):
    g = np.random.default_rng(seed)
    centres = np.array([[0.0, 3.0], [-2.6, -1.5], [2.6, -1.5]])
    X = np.concatenate([c + g.standard_normal((n_per_class, 2)) for c in centres])
    y = np.repeat(np.arange(3), n_per_class)
    return X.astype(np.float32), y


def test_fit_trains_a_linear_model_with_it(device):
    X, y = _three_blobs()
    model = dl.Linear(2, 3).to(device)
    history = dl.fit(model, dl.MulticlassHingeLoss(), dl.SGD(model, lr=0.1), X, y, epochs=15,
                     batch_size=32, seed=0, progress=False, validation=(X, y))
    assert history.train_accuracy[-1] is not None and history.val_accuracy[-1] > 0.9
    assert history.train_loss[-1] < 0.5 * history.train_loss[0]
    result = dl.evaluate(model, X, y, loss=dl.MulticlassHingeLoss())
    assert result["accuracy"] == history.val_accuracy[-1]
    assert result["loss"] == pytest.approx(history.val_loss[-1])


def test_fit_names_labels_out_of_range():
    X, y = _three_blobs()
    model = dl.Linear(2, 3)
    with pytest.raises(ValueError, match=r"labels must be in \[0, 2\]"):
        dl.fit(model, dl.MulticlassHingeLoss(), dl.SGD(model, lr=0.1), X, y + 1, epochs=1,
               progress=False)


# --------------------------------------------------------------------------------------
# Parity with PyTorch (where it is installed)
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("margin", [1.0, 0.5, 2.0])
def test_equals_torch_multi_margin_loss_times_the_number_of_classes(margin):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch "
                                                "(a CPU wheel is enough) to compare with it")
    scores, labels = randn(7, 5, seed=2) * 2, np.random.default_rng(3).integers(0, 5, 7)
    C = scores.shape[1]
    t_scores = torch.tensor(scores, requires_grad=True)
    t_loss = torch.nn.MultiMarginLoss(margin=margin)(t_scores, torch.tensor(labels))
    t_loss.backward()
    loss = dl.MulticlassHingeLoss(margin)
    assert loss.forward(scores, labels) == pytest.approx(t_loss.item() * C, rel=1e-12)
    np.testing.assert_allclose(loss.backward(), t_scores.grad.numpy() * C, rtol=1e-12,
                               atol=1e-15)


# --------------------------------------------------------------------------------------
# Errors that speak to a learner
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("scores, labels, error, words", [
    (np.array([1.0, 2.0, 3.0]), np.array([0]), ValueError, "expects scores of shape (N, C)"),
    (np.array([[1, 2], [3, 4]]), np.array([0, 1]), TypeError, "floating-point"),
    (np.zeros((0, 3)), np.zeros(0, np.int64), ValueError, "empty batch"),
    (np.zeros((2, 1)), np.array([0, 0]), ValueError, "at least two classes"),
    (np.zeros((2, 3)), np.array([0.0, 1.0]), TypeError, "integer class labels"),
    (np.zeros((2, 3)), np.array([0, 3]), ValueError, "labels must be in [0, 2]"),
    (np.zeros((2, 3)), np.array([[0], [1]]), ValueError, "labels.ravel()"),
])
def test_errors_name_what_is_wrong(scores, labels, error, words):
    with pytest.raises(error) as e:
        dl.MulticlassHingeLoss().forward(scores, labels)
    assert words in str(e.value), str(e.value)


@pytest.mark.parametrize("margin, error", [(-1.0, ValueError), ("1", TypeError),
                                           (float("nan"), ValueError)])
def test_a_bad_margin_is_refused(margin, error):
    with pytest.raises(error, match=r"MulticlassHingeLoss\(margin=\.\.\.\)"):
        dl.MulticlassHingeLoss(margin=margin)


def test_backward_needs_forward_first():
    with pytest.raises(RuntimeError, match="needs forward"):
        dl.MulticlassHingeLoss().backward()


# --------------------------------------------------------------------------------------
# The lesson's check, dl.check.hinge_grad: each wrong answer is written as a learner would
# --------------------------------------------------------------------------------------
def expect_fail(fn, *words):
    with pytest.raises(ExerciseError) as e:
        dl.check.hinge_grad(fn)
    msg = str(e.value)
    for w in words:
        assert w in msg, (w, msg)


def _parts(scores, y, margin, ge=False):
    xp = dl.get_array_module(scores)
    N = scores.shape[0]
    rows = xp.arange(N)
    raw = scores - scores[rows, y][:, None] + margin
    terms = xp.maximum(0, raw)
    terms[rows, y] = 0
    mask = ((raw >= 0) if ge else (raw > 0)).astype(scores.dtype)
    mask[rows, y] = 0
    return rows, terms, mask


def hinge_good(scores, y, margin=1.0):
    N = scores.shape[0]
    rows, terms, mask = _parts(scores, y, margin)
    mask[rows, y] = -mask.sum(axis=1)
    return float(terms.sum() / N), mask / N


def hinge_no_mean(scores, y, margin=1.0):
    loss, d = hinge_good(scores, y, margin)
    return loss * scores.shape[0], d * scores.shape[0]


def hinge_own_term(scores, y, margin=1.0):
    xp = dl.get_array_module(scores)
    raw = scores - scores[xp.arange(len(y)), y][:, None] + margin
    return float(xp.maximum(0, raw).sum() / len(y)), hinge_good(scores, y, margin)[1]


def hinge_own_term_in_grad(scores, y, margin=1.0):
    N = scores.shape[0]
    rows, terms, mask = _parts(scores, y, margin)
    mask[rows, y] = -mask.sum(axis=1) - 1
    return float(terms.sum() / N), mask / N


def hinge_ge(scores, y, margin=1.0):
    N = scores.shape[0]
    rows, terms, mask = _parts(scores, y, margin, ge=True)
    mask[rows, y] = -mask.sum(axis=1)
    return float(terms.sum() / N), mask / N


def hinge_no_count(scores, y, margin=1.0):
    N = scores.shape[0]
    _, terms, mask = _parts(scores, y, margin)
    return float(terms.sum() / N), mask / N


def hinge_one_hot(scores, y, margin=1.0):
    N = scores.shape[0]
    rows, terms, mask = _parts(scores, y, margin)
    mask[rows, y] = -np.sign(mask.sum(axis=1))
    return float(terms.sum() / N), mask / N


def hinge_margin_one(scores, y, margin=1.0):
    return hinge_good(scores, y, 1.0)


def hinge_sign(scores, y, margin=1.0):
    loss, d = hinge_good(scores, y, margin)
    return loss, -d


def hinge_in_place(scores, y, margin=1.0):
    out = hinge_good(scores.copy(), y, margin)
    scores -= 1
    return out


def hinge_loop(scores, y, margin=1.0):
    N, C = scores.shape
    loss, dscores = 0.0, np.zeros_like(scores)
    for n in range(N):
        for j in range(C):
            if j == y[n]:
                continue
            term = scores[n, j] - scores[n, y[n]] + margin
            if term > 0:
                loss += term
                dscores[n, j] += 1
                dscores[n, y[n]] -= 1
    return loss / N, dscores / N


def hinge_library(scores, y, margin=1.0):
    loss = dl.MulticlassHingeLoss(margin)
    return loss.forward(scores, y), loss.backward()


def hinge_softmax(scores, y, margin=1.0):
    loss = dl.SoftmaxCrossEntropy()
    return loss.forward(scores, y), loss.backward()


def test_the_check_passes_a_right_answer_on_every_backend(device, capsys):
    """Where a GPU is usable (or the CuPy stand-in), the check also runs a case on CuPy."""
    dl.check.hinge_grad(hinge_good)
    out = capsys.readouterr().out
    assert ("all 6 cases pass (NumPy and CuPy)" if device == "gpu" else
            "all 5 cases pass (NumPy)") in out, out


def test_the_check_names_a_numpy_answer_on_the_gpu(device):
    if device != "gpu":
        pytest.skip("the GPU case runs only where a GPU (or the CuPy stand-in) is present")

    def hinge_numpy(scores, y, margin=1.0):
        loss, d = hinge_good(dl.to_numpy(scores), dl.to_numpy(y), margin)
        return loss, d
    expect_fail(hinge_numpy, "came back as a NumPy array")


@pytest.mark.parametrize("fn, words", [
    (hinge_no_mean, ["times too large", "MEAN over the N samples"]),
    (hinge_own_term, ["the right class's own term", "WRONG classes j != y only"]),
    (hinge_own_term_in_grad, ["one too negative", "counted its own term"]),
    (hinge_ge, ["exactly AT the margin", "strict >"]),
    (hinge_no_count, ["the right class's column is 0", "EVERY violated term"]),
    (hinge_one_hot, ["-1/N", "NUMBER of violated margins"]),
    (hinge_margin_one, ["margin = 0.5", "use the margin argument"]),
    (hinge_sign, ["sign is flipped"]),
    (hinge_in_place, ["changed its input scores in place"]),
    (hinge_loop, ["loops over the samples in Python", "vectorize"]),
    (hinge_library, ["it calls dl.MulticlassHingeLoss,", "library's own version"]),
    (hinge_softmax, ["it calls dl.SoftmaxCrossEntropy", "library's own version"]),
], ids=lambda v: v.__name__ if callable(v) else "")
def test_the_check_names_each_mistake(fn, words):
    expect_fail(fn, *words)


def test_the_check_names_the_missing_return_values():
    expect_fail(lambda scores, y, margin=1.0: hinge_good(scores, y, margin)[1],
                "expected 2 values (loss, dscores)")
