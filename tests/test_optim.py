"""Optimizers and learning-rate schedules: each update rule against a straightforward
reference written from its formula, hand-computed first steps, AdamW against L2-in-Adam,
the schedules' values and their use from fit. Each test runs on NumPy and (where a GPU is
present) CuPy."""
import math

import numpy as np
import pytest

import dlcourse as dl


def reference_run(rule, p, grads, **h):
    """The update rules as written in the docstrings, one coordinate array at a time, in
    float64 NumPy: returns p after one step per gradient in ``grads``."""
    p, state, t = p.copy(), {}, 0
    for g in grads:
        t += 1
        if rule == "adagrad":
            g = g + h["weight_decay"] * p
            state["G"] = state.get("G", 0) + g * g
            p = p - h["lr"] * g / (np.sqrt(state["G"]) + h["eps"])
        elif rule == "rmsprop":
            g = g + h["weight_decay"] * p
            state["v"] = h["alpha"] * state.get("v", 0) + (1 - h["alpha"]) * g * g
            step = g / (np.sqrt(state["v"]) + h["eps"])
            if h["momentum"]:
                state["b"] = h["momentum"] * state.get("b", 0) + step
                step = state["b"]
            p = p - h["lr"] * step
        else:                                   # "adam" (L2 in the gradient) or "adamw"
            b1, b2 = h["betas"]
            if rule == "adamw":
                p = p - h["lr"] * h["weight_decay"] * p
            else:
                g = g + h["weight_decay"] * p
            state["m"] = b1 * state.get("m", 0) + (1 - b1) * g
            state["v"] = b2 * state.get("v", 0) + (1 - b2) * g * g
            m_hat, v_hat = state["m"] / (1 - b1 ** t), state["v"] / (1 - b2 ** t)
            p = p - h["lr"] * m_hat / (np.sqrt(v_hat) + h["eps"])
    return p


CASES = {
    "adagrad": (dl.Adagrad, dict(lr=0.1, eps=1e-10, weight_decay=0.0)),
    "adagrad_wd": (dl.Adagrad, dict(lr=0.05, eps=1e-6, weight_decay=0.1)),
    "rmsprop": (dl.RMSprop, dict(lr=0.01, alpha=0.99, eps=1e-8, momentum=0.0, weight_decay=0.0)),
    "rmsprop_momentum_wd": (dl.RMSprop, dict(lr=0.01, alpha=0.9, eps=1e-8, momentum=0.9,
                                             weight_decay=0.01)),
    "adam_l2": (dl.Adam, dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)),
    "adamw": (dl.AdamW, dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)),
}


@pytest.mark.parametrize("case", CASES)
def test_optimizer_matches_its_formula(case, device, to_dev):
    cls, h = CASES[case]
    rule = case.split("_")[0]
    rng = np.random.default_rng(0)
    model = dl.Linear(3, 2, seed=0).astype(np.float64).to(device)
    start = {k: dl.to_numpy(v).copy() for k, v in model.params.items()}
    grads = [{k: rng.standard_normal(v.shape) for k, v in start.items()} for _ in range(4)]
    opt = cls(model, **h)
    for g in grads:
        model.grads = {k: to_dev(v) for k, v in g.items()}
        opt.step()
    for k in start:
        want = reference_run(rule, start[k], [g[k] for g in grads], **h)
        np.testing.assert_allclose(dl.to_numpy(model.params[k]), want, rtol=1e-12, atol=1e-14,
                                   err_msg=f"{case}: {k}")


def _one_step(make, g, device, to_dev):
    model = dl.Linear(1, 2, seed=0).astype(np.float64).to(device)
    p0 = dl.to_numpy(model.params["W"]).copy()
    model.grads = {"W": to_dev(np.array([g])), "b": to_dev(np.zeros(2))}
    make(model).step()
    return dl.to_numpy(model.params["W"]) - p0


def test_first_steps_are_the_ones_derived(device, to_dev):
    """Adagrad's and Adam's first step is lr * sign(g) whatever the size of g; RMSprop's is
    lr * sign(g) / sqrt(1 - alpha) (no bias correction); AdamW shrinks p by lr * wd first."""
    g = [3.0, -1e-3]
    sign = np.sign([g])
    step = _one_step(lambda m: dl.Adagrad(m, lr=0.1, eps=1e-300), g, device, to_dev)
    np.testing.assert_allclose(step, -0.1 * sign, rtol=1e-9)
    step = _one_step(lambda m: dl.RMSprop(m, lr=0.01, alpha=0.99, eps=1e-300), g, device, to_dev)
    np.testing.assert_allclose(step, -0.01 * sign / math.sqrt(0.01), rtol=1e-9)
    step = _one_step(lambda m: dl.Adam(m, lr=0.01, eps=1e-300), g, device, to_dev)
    np.testing.assert_allclose(step, -0.01 * sign, rtol=1e-9)


def test_adamw_decouples_weight_decay_from_the_gradient(device, to_dev):
    """With zero gradients Adam's L2 term, divided by its own size, moves every weight by
    about lr whatever its value; AdamW shrinks each by the same fraction lr * wd. With
    weight_decay=0 the two are Adam."""
    def run(make, grad_scale):
        model = dl.Linear(4, 3, seed=1).astype(np.float64).to(device)
        W0 = dl.to_numpy(model.params["W"]).copy()
        opt = make(model)
        for _ in range(3):
            model.grads = {k: v * grad_scale for k, v in
                           ((k, dl.get_array_module(v).ones_like(v)) for k, v in model.params.items())}
            opt.step()
        return W0, dl.to_numpy(model.params["W"])
    W0, adamw = run(lambda m: dl.AdamW(m, lr=0.01, weight_decay=0.5), 0.0)
    np.testing.assert_allclose(adamw, W0 * (1 - 0.01 * 0.5) ** 3, rtol=1e-12)
    _, adam_l2 = run(lambda m: dl.Adam(m, lr=0.01, weight_decay=0.5), 0.0)
    moved = np.abs(W0 - adam_l2)                   # about lr per step, whatever the weight
    assert moved.min() > 0.02 and moved.max() < 0.0301, moved
    assert not np.allclose(adamw, adam_l2)
    _, plain = run(lambda m: dl.Adam(m, lr=0.01), 1.0)
    _, adamw0 = run(lambda m: dl.AdamW(m, lr=0.01, weight_decay=0.0), 1.0)
    np.testing.assert_array_equal(plain, adamw0)


def test_only_sgd_and_adam_have_a_kernel():
    """The new optimizers run their array code on the GPU too: kernels.kernels_for is asked
    with the switch off, whatever dl.use_kernels says."""
    model = dl.Linear(2, 2)
    assert dl.SGD(model).kernel == "sgd_momentum_update" and dl.Adam(model).kernel == "adam_update"
    for opt in (dl.Adagrad(model), dl.RMSprop(model), dl.AdamW(model)):
        assert dl.use_kernels(opt, True).kernel is None


@pytest.mark.parametrize("make,words", [
    (lambda m: dl.Adagrad(m, lr=-1), r"learning rate must be a finite number > 0"),
    (lambda m: dl.Adagrad(m, eps=0), r"Adagrad\(eps=\.\.\.\) must be a finite number in \(0, inf\)"),
    (lambda m: dl.RMSprop(m, alpha=1.5), r"RMSprop\(alpha=\.\.\.\) must be a finite number in \[0, 1\)"),
    (lambda m: dl.RMSprop(m, momentum=float("nan")), r"RMSprop\(momentum=\.\.\.\)"),
    (lambda m: dl.RMSprop(m, weight_decay=-1), r"RMSprop\(weight_decay=\.\.\.\)"),
    (lambda m: dl.AdamW(m, betas=(0.9,)), r"AdamW\(betas=\.\.\.\) takes a pair"),
    (lambda m: dl.AdamW(m, weight_decay="0.1"), r"AdamW\(weight_decay=\.\.\.\) expects a number"),
])
def test_new_optimizers_say_what_is_wrong(make, words):
    with pytest.raises((TypeError, ValueError), match=words):
        make(dl.Linear(2, 2))


# --------------------------------------------------------------------------------------
# Schedules
# --------------------------------------------------------------------------------------
def test_schedules_follow_their_formulas():
    step = dl.step_decay(0.1, every=10, gamma=0.5)
    assert [step(e) for e in (0, 9.99, 10, 25)] == [0.1, 0.1, 0.05, 0.025]
    cos = dl.cosine_decay(1.0, epochs=4, min_lr=0.2)
    assert cos(0) == 1.0 and cos(2) == pytest.approx(0.6) and cos(4) == pytest.approx(0.2)
    assert cos(9) == pytest.approx(0.2)                       # after the end: min_lr
    warm = dl.linear_warmup(cos, epochs=2, start=0.1)
    assert warm(0) == pytest.approx(0.1) and warm(1) == pytest.approx(0.55 * cos(1))
    assert warm(3) == cos(3)
    assert dl.linear_warmup(0.01, epochs=1)(5) == 0.01        # a number is a constant rate
    held = dl.per_epoch(cos)                                  # one rate per epoch
    assert [held(e) for e in (0, 0.5, 0.99, 2, 2.7)] == [cos(0), cos(0), cos(0), cos(2), cos(2)]


@pytest.mark.parametrize("make,words", [
    (lambda: dl.step_decay(0.1, every=0), r"step_decay\(every=\.\.\.\)"),
    (lambda: dl.step_decay(0.1, every=5, gamma=2), r"step_decay\(gamma=\.\.\.\) must be .* \(0, 1\]"),
    (lambda: dl.cosine_decay(-1, epochs=5), r"cosine_decay\(lr=\.\.\.\)"),
    (lambda: dl.cosine_decay(0.1, epochs=5, min_lr=0.5), r"cosine_decay\(min_lr=\.\.\.\)"),
    (lambda: dl.linear_warmup(0.1, epochs=float("inf")), r"linear_warmup\(epochs=\.\.\.\)"),
])
def test_schedules_say_what_is_wrong(make, words):
    with pytest.raises((TypeError, ValueError), match=words):
        make()


def test_fit_follows_the_schedule_and_records_the_rates(device):
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((40, 3)).astype(np.float32), rng.integers(0, 2, 40)
    model = dl.MLP([3, 4, 2], seed=0).to(device)
    opt = dl.SGD(model, lr=1.0)
    history = dl.fit(model, dl.SoftmaxCrossEntropy(), opt, X, y, epochs=3, batch_size=10,
                     progress=False, seed=0, lr_schedule=lambda epoch: 0.1 * (1 + epoch))
    assert history.step_lr == pytest.approx([0.1 * (1 + s / 4) for s in range(12)])
    assert history.lr == pytest.approx([0.1 * (1 + e + 0.75) for e in range(3)])
    assert opt.lr == history.step_lr[-1]
    table = history.table().splitlines()                        # the rate has a column
    assert table[0].split()[-1] == "lr" and table[3].split()[-1] == "3.75e-01"
    plain = dl.fit(model, dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.05), X, y, epochs=1,
                   progress=False)
    assert plain.lr == [0.05] and set(plain.step_lr) == {0.05}
    assert "lr" not in plain.table()                            # a constant rate has none


@pytest.mark.parametrize("schedule,error,words", [
    (0.01, TypeError, r"fit\(lr_schedule=\.\.\.\) takes a function of the epoch.*got float"),
    (lambda epoch: float("nan"), ValueError, r"fit\(lr_schedule=\.\.\.\) at epoch 0 must be a finite"),
    (lambda epoch: -0.1 * epoch, ValueError, r"at epoch 0 must be a finite number in \(0, inf\)"),
])
def test_fit_refuses_a_bad_schedule(schedule, error, words):
    model = dl.MLP([3, 2], seed=0)
    X, y = np.zeros((4, 3), np.float32), np.array([0, 1, 0, 1])
    with pytest.raises(error, match=words):
        dl.fit(model, dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.1), X, y, epochs=1,
               progress=False, lr_schedule=schedule)


# --------------------------------------------------------------------------------------
# Gradient clipping (lesson 04b): dl.clip_grad_norm; fit(clip_norm=...) is in test_train.py
# --------------------------------------------------------------------------------------
def _model_with_grads(device, to_dev, scale=1.0):
    """An MLP in float64 whose gradients are fixed random arrays (their norm about 7 * scale)."""
    model = dl.MLP([3, 4, 2], seed=0).astype(np.float64).to(device)
    loss = dl.SoftmaxCrossEntropy()
    loss.forward(model.forward(to_dev(np.ones((2, 3)))), to_dev(np.array([0, 1])))
    model.backward(loss.backward())                          # the layers' grads exist
    rng = np.random.default_rng(1)
    for g in model.grads.values():                           # ... and get known values
        g[...] = to_dev(scale * rng.standard_normal(g.shape))
    return model


def _global_norm(grads):
    return math.sqrt(sum(float((dl.to_numpy(g) ** 2).sum()) for g in grads.values()))


def test_clip_grad_norm_caps_the_global_norm_and_keeps_the_direction(device, to_dev):
    model = _model_with_grads(device, to_dev)
    before = {k: dl.to_numpy(g).copy() for k, g in model.grads.items()}
    arrays = dict(model.grads)
    norm = _global_norm(before)
    returned = dl.clip_grad_norm(model, norm / 4)
    assert isinstance(returned, float) and returned == pytest.approx(norm, rel=1e-12)
    assert _global_norm(model.grads) == pytest.approx(norm / 4, rel=1e-6)
    for k, g in model.grads.items():
        assert g is arrays[k]                                   # in place: the model's arrays
        # the same factor for every parameter: the direction of the whole gradient is kept
        np.testing.assert_allclose(dl.to_numpy(g), before[k] * (norm / 4) / (norm + 1e-6),
                                   rtol=1e-12, err_msg=k)


@pytest.mark.parametrize("max_norm", [1e3, "norm"])
def test_clip_grad_norm_below_the_threshold_changes_nothing(max_norm, device, to_dev):
    model = _model_with_grads(device, to_dev)
    before = {k: dl.to_numpy(g).copy() for k, g in model.grads.items()}
    norm = _global_norm(before)
    assert dl.clip_grad_norm(model, norm if max_norm == "norm" else max_norm) == pytest.approx(norm)
    for k, g in model.grads.items():
        np.testing.assert_array_equal(dl.to_numpy(g), before[k], err_msg=k)


def test_clip_grad_norm_takes_a_dict_and_float32(device, to_dev):
    grads = {"a": to_dev(np.full((2, 2), 3.0, np.float32)), "b": to_dev(np.full(1, 4.0, np.float32))}
    assert dl.clip_grad_norm(grads, 1.0) == pytest.approx(math.sqrt(4 * 9 + 16))   # 2 * sqrt(13)
    assert grads["a"].dtype == np.float32
    assert _global_norm(grads) == pytest.approx(1.0, rel=1e-5)


def test_clip_grad_norm_leaves_a_non_finite_gradient_to_fit(device, to_dev):
    grads = {"a": to_dev(np.array([1.0, np.inf])), "b": to_dev(np.array([2.0]))}
    assert dl.clip_grad_norm(grads, 1.0) == np.inf
    np.testing.assert_array_equal(dl.to_numpy(grads["b"]), [2.0])


def test_clip_grad_norm_equals_torchs_clip_grad_norm_():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: the parity with "
                                                "torch.nn.utils.clip_grad_norm_ is not checked")
    for scale, max_norm in ((1.0, 0.5), (1.0, 2.5), (1e-3, 0.5), (30.0, 1.0)):
        model = _model_with_grads("cpu", np.asarray, scale)
        tensors = []
        for g in model.grads.values():
            t = torch.zeros(g.shape, dtype=torch.float64, requires_grad=True)
            t.grad = torch.from_numpy(g.copy())
            tensors.append(t)
        want = float(torch.nn.utils.clip_grad_norm_(tensors, max_norm))
        assert dl.clip_grad_norm(model, max_norm) == pytest.approx(want, rel=1e-12)
        for g, t in zip(model.grads.values(), tensors):
            np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("model,max_norm,error,words", [
    ("model", 0, ValueError, r"clip_grad_norm\(max_norm=\.\.\.\) must be a finite number in \(0, inf\)"),
    ("model", -1.0, ValueError, r"in \(0, inf\), got -1\.0\. E\.g\. max_norm=1\.0"),
    ("model", float("inf"), ValueError, r"must be a finite number"),
    ("model", float("nan"), ValueError, r"must be a finite number"),
    ("model", "1", TypeError, r"expects a number, e\.g\. max_norm=1\.0"),
    ("no grads", 1.0, ValueError, r"no gradients yet: call model\.backward"),
    ("not a model", 1.0, TypeError, r"needs a model with grads .* got int"),
])
def test_clip_grad_norm_says_what_is_wrong(model, max_norm, error, words):
    target = {"model": dl.MLP([2, 2], seed=0), "no grads": {}, "not a model": 3}[model]
    if model == "model":
        target.backward(target.forward(np.ones((1, 2), np.float32)))
    with pytest.raises(error, match=words):
        dl.clip_grad_norm(target, max_norm)
