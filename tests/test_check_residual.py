"""The lesson 07b exercise checks (dlcourse/check/residual.py): a right answer passes, and each
common wrong answer gets the message that names its mistake. The checks' references (the
library's LayerNorm and Residual) are held to finite differences here.

Each wrong answer is a small function named after its mistake, written as a learner would."""
import numpy as np
import pytest

import dlcourse as dl
import dlcourse.check as C
from dlcourse.check import residual as R
from support.expect import expect_fail



# ---- layernorm_backward
def ln_paths(dout, x_hat, std, gamma, *, axis=1, mean_path=True, var_path=True, reduce=np.mean):
    d = dout * gamma
    out = d
    if mean_path:
        out = out - reduce(d, axis=axis, keepdims=True)
    if var_path:
        out = out - x_hat * reduce(d * x_hat, axis=axis, keepdims=True)
    return out / std


def ln_good(dout, cache, gamma):
    x_hat, std = cache
    return ln_paths(dout, x_hat, std, gamma), (dout * x_hat).sum(axis=0), dout.sum(axis=0)


def ln_batch_axis(dout, cache, gamma):        # BatchNorm's axis
    x_hat, std = cache
    return (ln_paths(dout, x_hat, std, gamma, axis=0), (dout * x_hat).sum(axis=0),
            dout.sum(axis=0))


def ln_no_mean_path(dout, cache, gamma):
    x_hat, std = cache
    return (ln_paths(dout, x_hat, std, gamma, mean_path=False), (dout * x_hat).sum(axis=0),
            dout.sum(axis=0))


def ln_no_var_path(dout, cache, gamma):
    x_hat, std = cache
    return (ln_paths(dout, x_hat, std, gamma, var_path=False), (dout * x_hat).sum(axis=0),
            dout.sum(axis=0))


def ln_sums_not_means(dout, cache, gamma):     # the 1/D forgotten
    x_hat, std = cache
    return (ln_paths(dout, x_hat, std, gamma, reduce=np.sum), (dout * x_hat).sum(axis=0),
            dout.sum(axis=0))


def ln_direct_only(dout, cache, gamma):
    x_hat, std = cache
    return dout * gamma / std, (dout * x_hat).sum(axis=0), dout.sum(axis=0)


def ln_no_gamma(dout, cache, gamma):
    x_hat, std = cache
    return (ln_paths(dout, x_hat, std, np.ones_like(gamma)), (dout * x_hat).sum(axis=0),
            dout.sum(axis=0))


def ln_dgamma_over_features(dout, cache, gamma):
    x_hat, std = cache
    return ln_paths(dout, x_hat, std, gamma), (dout * x_hat).sum(axis=1), dout.sum(axis=0)


def ln_dgamma_is_dbeta(dout, cache, gamma):
    x_hat, std = cache
    return ln_paths(dout, x_hat, std, gamma), dout.sum(axis=0), dout.sum(axis=0)


def ln_dbeta_mean(dout, cache, gamma):
    x_hat, std = cache
    return ln_paths(dout, x_hat, std, gamma), (dout * x_hat).sum(axis=0), dout.mean(axis=0)


def ln_in_place(dout, cache, gamma):
    x_hat, std = cache
    dbeta, dgamma = dout.sum(axis=0), (dout * x_hat).sum(axis=0)
    dout *= gamma
    dx = (dout - dout.mean(axis=1, keepdims=True)
          - x_hat * (dout * x_hat).mean(axis=1, keepdims=True)) / std
    return dx, dgamma, dbeta


def ln_via_batchnorm(dout, cache, gamma):     # each sample as a channel of BatchNorm2d
    x_hat, std = cache
    N, D = x_hat.shape
    bn = dl.BatchNorm2d(N, eps=1e-12, dtype=x_hat.dtype)
    bn.forward(x_hat.reshape(1, N, D, 1))
    dx = bn.backward((dout * gamma).reshape(1, N, D, 1)).reshape(N, D)
    return dx / std, (dout * x_hat).sum(axis=0), dout.sum(axis=0)


def ln_via_layernorm(dout, cache, gamma):
    x_hat, std = cache
    ln = dl.LayerNorm(x_hat.shape[1], eps=1e-12, dtype=x_hat.dtype)
    ln.forward(x_hat)
    return ln.backward(dout * gamma) / std, (dout * x_hat).sum(axis=0), dout.sum(axis=0)


def test_layernorm_backward_passes_a_right_answer_and_names_each_mistake():
    C.layernorm_backward(ln_good)
    expect_fail(C.layernorm_backward, ln_batch_axis, "axis 0, as in BatchNorm", "ONE sample")
    expect_fail(C.layernorm_backward, ln_no_mean_path, "the mean's path is missing")
    expect_fail(C.layernorm_backward, ln_no_var_path, "the variance's path is missing")
    expect_fail(C.layernorm_backward, ln_sums_not_means, "D times too large", "1/D")
    expect_fail(C.layernorm_backward, ln_direct_only, "only the direct path")
    expect_fail(C.layernorm_backward, ln_no_gamma, "gamma is missing")
    expect_fail(C.layernorm_backward, ln_dgamma_over_features, "dgamma", "axis 0")
    expect_fail(C.layernorm_backward, ln_dgamma_is_dbeta, "summing dout alone is dbeta")
    expect_fail(C.layernorm_backward, ln_dbeta_mean, "SUM over the batch")
    expect_fail(C.layernorm_backward, ln_in_place, "changed its input dout in place")
    expect_fail(C.layernorm_backward, ln_via_batchnorm, "library's own version",
                "BatchNorm2d")
    expect_fail(C.layernorm_backward, ln_via_layernorm, "library's own version", "LayerNorm")


def ln_sample_by_sample(dout, cache, gamma):
    """Right values, the lesson's rule ("vectorized, over the whole batch") broken."""
    x_hat, std = cache
    dx = np.empty_like(dout)
    for n in range(dout.shape[0]):
        d = gamma * dout[n]
        dx[n] = (d - d.mean() - x_hat[n] * (d * x_hat[n]).mean()) / std[n]
    return dx, (dout * x_hat).sum(axis=0), dout.sum(axis=0)


def ln_loop_over_features(dout, cache, gamma):
    """Right, written differently: a loop over the D features (not the batch), einsum, float64."""
    x_hat, std = cache
    N, D = dout.shape
    d = (gamma * dout).astype(np.float64)
    s1, s2 = np.zeros((N, 1)), np.zeros((N, 1))
    for j in range(D):
        s1 += d[:, j:j + 1]
        s2 += d[:, j:j + 1] * x_hat[:, j:j + 1]
    return (d - s1 / D - x_hat * s2 / D) / std, np.einsum("nd,nd->d", dout, x_hat), dout.sum(0)


def test_layernorm_backward_holds_the_lessons_rule_vectorized(capsys):
    expect_fail(C.layernorm_backward, ln_sample_by_sample, "loops over the samples",
                "vectorized, over the whole batch at once")
    C.layernorm_backward(ln_loop_over_features)
    assert "all 5 cases pass" in capsys.readouterr().out


def test_layernorm_backward_names_dgamma_over_the_wrong_axis_where_the_shapes_agree():
    # the case with N == D: a sum over the features has gamma's shape, only its values tell
    x, gamma, dout, eps = R._layernorm_cases()[1]
    assert x.shape[0] == x.shape[1]
    calls = []

    def wrong_axis_only_when_square(dout, cache, gamma):
        calls.append(dout.shape)
        dx, dgamma, dbeta = ln_good(dout, cache, gamma)
        if dout.shape[0] == dout.shape[1]:
            dgamma = (dout * cache[0]).sum(axis=1)
        return dx, dgamma, dbeta
    expect_fail(C.layernorm_backward, wrong_axis_only_when_square, "summed over the wrong axis",
                f"({x.shape[0]}, {x.shape[1]})")
    assert len(calls) == 2


# ---- residual_backward
def _branch(dout, cache, params, mask=True):
    x, h = cache
    dh = dout @ params["W2"].T
    return dh * (h > 0) if mask else dh


def res_good(dout, cache, params):
    x, h = cache
    dz = _branch(dout, cache, params)
    grads = {"W2": h.T @ dout, "b2": dout.sum(axis=0), "W1": x.T @ dz, "b1": dz.sum(axis=0)}
    return dout + dz @ params["W1"].T, grads


def _with_dx(dx_of):
    def fn(dout, cache, params):
        _, grads = res_good(dout, cache, params)
        return dx_of(dout, cache, params), grads
    return fn


res_no_skip = _with_dx(lambda dout, cache, p: _branch(dout, cache, p) @ p["W1"].T)
res_no_skip.__name__ = "res_no_skip"
res_skip_only = _with_dx(lambda dout, cache, p: dout)
res_skip_only.__name__ = "res_skip_only"
res_no_mask = _with_dx(lambda dout, cache, p: dout + _branch(dout, cache, p, mask=False)
                       @ p["W1"].T)
res_no_mask.__name__ = "res_no_mask"
res_mask_after_W1 = _with_dx(lambda dout, cache, p: dout + (_branch(dout, cache, p, mask=False)
                                                            @ p["W1"].T) * (cache[1] > 0))
res_mask_after_W1.__name__ = "res_mask_after_W1"
res_no_transposes = _with_dx(lambda dout, cache, p: dout + ((dout @ p["W2"]) * (cache[1] > 0))
                             @ p["W1"])
res_no_transposes.__name__ = "res_no_transposes"
res_skip_twice = _with_dx(lambda dout, cache, p: 2 * dout + _branch(dout, cache, p) @ p["W1"].T)
res_skip_twice.__name__ = "res_skip_twice"


def res_skip_into_the_block(dout, cache, params):   # adds the skip before going back
    x, h = cache
    g = dout + dout @ params["W2"].T
    dz = g * (h > 0)
    grads = {"W2": h.T @ dout, "b2": dout.sum(axis=0), "W1": x.T @ dz, "b1": dz.sum(axis=0)}
    return dout + dz @ params["W1"].T, grads


def res_dW2_from_x(dout, cache, params):
    dx, grads = res_good(dout, cache, params)
    x, _ = cache
    if x.shape[1] == params["W2"].shape[0]:
        grads["W2"] = x.T @ dout
    return dx, grads


def res_db1_no_mask(dout, cache, params):
    dx, grads = res_good(dout, cache, params)
    grads["b1"] = (dout @ params["W2"].T).sum(axis=0)
    return dx, grads


def res_dW1_no_mask(dout, cache, params):
    dx, grads = res_good(dout, cache, params)
    grads["W1"] = cache[0].T @ (dout @ params["W2"].T)
    return dx, grads


def res_averaged(dout, cache, params):
    dx, grads = res_good(dout, cache, params)
    grads["W2"] = grads["W2"] / len(dout)
    return dx, grads


def res_renamed_keys(dout, cache, params):
    dx, grads = res_good(dout, cache, params)
    return dx, {"d" + k: v for k, v in grads.items()}


def res_via_library(dout, cache, params):
    x, h = cache
    D, H = params["W1"].shape
    first, second = dl.Linear(D, H, dtype=x.dtype), dl.Linear(H, D, dtype=x.dtype)
    first.params = {"W": params["W1"], "b": params["b1"]}
    second.params = {"W": params["W2"], "b": params["b2"]}
    block = dl.Sequential(first, dl.ReLU(), second)
    block.forward(x)
    dx = dout + block.backward(dout)
    return dx, {"W1": first.grads["W"], "b1": first.grads["b"], "W2": second.grads["W"],
                "b2": second.grads["b"]}


def test_residual_backward_passes_a_right_answer_and_names_each_mistake():
    C.residual_backward(res_good)
    expect_fail(C.residual_backward, res_no_skip, "the skip path is missing")
    expect_fail(C.residual_backward, res_skip_only, "the skip path only")
    expect_fail(C.residual_backward, res_no_mask, "mask is missing")
    expect_fail(C.residual_backward, res_mask_after_W1, "wrong place", "between the two Linears")
    expect_fail(C.residual_backward, res_no_transposes, "transposes")
    expect_fail(C.residual_backward, res_skip_twice, "counted twice")
    expect_fail(C.residual_backward, res_skip_into_the_block,
                "the skip is added in the wrong place")
    expect_fail(C.residual_backward, res_dW2_from_x, "W2's input is h")
    expect_fail(C.residual_backward, res_db1_no_mask, "db1 misses the ReLU's mask")
    expect_fail(C.residual_backward, res_dW1_no_mask, "dW1 misses the ReLU's mask")
    expect_fail(C.residual_backward, res_averaged, "divided by N")
    expect_fail(C.residual_backward, res_renamed_keys, "keys of params")
    expect_fail(C.residual_backward, res_via_library, "library's own version")


# ---- the checks' references, held to finite differences
def _numerical(f, a, eps=1e-6):
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        old = a[i]
        a[i] = old + eps
        up = f()
        a[i] = old - eps
        down = f()
        a[i] = old
        g[i] = (up - down) / (2 * eps)
    return g


def test_the_layernorm_reference_agrees_with_finite_differences():
    for x, gamma, dout, eps in R._layernorm_cases():
        x, gamma = x.copy(), gamma.copy()

        def loss():
            m, v = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
            return float((dout * (gamma * (x - m) / np.sqrt(v + eps))).sum())
        x_hat, std, dx, dgamma, dbeta = R._layernorm_reference(x, gamma, dout, eps)
        np.testing.assert_allclose(dx, _numerical(loss, x), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(dgamma, _numerical(loss, gamma), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(dbeta, dout.sum(axis=0))
        np.testing.assert_allclose(x_hat.mean(axis=1), 0, atol=1e-12)


def test_the_residual_reference_agrees_with_finite_differences():
    for x, p, dout in R._residual_cases():
        x, p = x.copy(), {k: v.copy() for k, v in p.items()}

        def loss():
            return float((dout * R._residual_forward(x, p)[0]).sum())
        ref = R._residual_reference(x, p, dout)
        np.testing.assert_allclose(ref["x"], _numerical(loss, x), rtol=1e-5, atol=1e-7)
        for k in p:
            np.testing.assert_allclose(ref[k], _numerical(loss, p[k]), rtol=1e-5, atol=1e-7)
        h = R._residual_forward(x, p)[1]
        assert (h > 0).any() and (h == 0).any(), "each case has hidden units on and off"


def test_no_residual_check_message_holds_a_line_of_a_reference_solution():
    from test_hints import test_no_check_message_holds_a_line_of_a_reference_solution as held
    held("residual")


def test_both_checks_run_a_case_on_each_backend(device, capsys):
    """On the cupy backend (a GPU, or the CuPy stand-in) each check adds a case with CuPy arrays
    and requires the results to stay there."""
    C.layernorm_backward(ln_good)
    C.residual_backward(res_good)
    out = capsys.readouterr().out
    where = "(NumPy and CuPy)" if device == "gpu" else "(NumPy)"
    assert out.count(where) == 2, out


def test_a_result_sent_back_to_the_host_is_named_on_the_cupy_backend(device):
    if device != "gpu":
        pytest.skip("the host/device mix-up exists on the cupy backend only")
    from dlcourse import backend

    def ln_on_the_host(dout, cache, gamma):
        return tuple(backend.to_numpy(a) if backend.device_of(a) == "gpu" else a
                     for a in ln_good(dout, cache, gamma))
    expect_fail(C.layernorm_backward, ln_on_the_host, "on the GPU", "NumPy array")
