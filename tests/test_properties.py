"""Property tests over shapes (hypothesis): the fast convolution and pooling equal the naive
loops for any geometry that fits; output sizes follow the formula."""
import numpy as np
import pytest

pytest.importorskip("hypothesis", reason="property tests need hypothesis (the test extra: "
                                         "pip install -e '.[test]')")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import dlcourse as dl
from dlcourse import conv


@st.composite
def conv_geometry(draw):
    N, C, F = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    KH, KW = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    stride, padding = draw(st.integers(1, 3)), draw(st.integers(0, 2))
    H = draw(st.integers(max(1, KH - 2 * padding), 9))
    W = draw(st.integers(max(1, KW - 2 * padding), 9))
    return N, C, H, W, F, KH, KW, stride, padding


@settings(max_examples=40, deadline=None)
@given(conv_geometry(), st.integers(0, 2**16))
def test_conv_fast_equals_naive(geom, seed):
    N, C, H, W, F, KH, KW, s, p = geom
    rng = np.random.default_rng(seed)
    layer = dl.Conv2d(C, F, (KH, KW), stride=s, padding=p, dtype=np.float64, seed=seed)
    x = rng.standard_normal((N, C, H, W))
    out = layer.forward(x)
    OH, OW = (H + 2 * p - KH) // s + 1, (W + 2 * p - KW) // s + 1
    assert out.shape == (N, F, OH, OW)
    assert np.allclose(out, conv.conv2d_forward_naive(x, layer.params["W"], layer.params["b"], s, p))
    dout = rng.standard_normal(out.shape)
    dx = layer.backward(dout)
    rdx, rdW, rdb = conv.conv2d_backward_naive(dout, x, layer.params["W"], s, p)
    assert np.allclose(dx, rdx) and np.allclose(layer.grads["W"], rdW) and np.allclose(layer.grads["b"], rdb)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(4, 9), st.integers(4, 9),
       st.integers(0, 2**16))
def test_maxpool_fast_equals_naive(KH, KW, stride, H, W, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 2, H, W))
    pool = dl.MaxPool2d((KH, KW), stride)
    out = pool.forward(x)
    assert np.array_equal(out, conv.maxpool_forward_naive(x, KH, KW, stride))
    dout = rng.standard_normal(out.shape)
    assert np.allclose(pool.backward(dout), conv.maxpool_backward_naive(dout, x, KH, KW, stride))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 5), st.integers(0, 2**16))
def test_linear_gradcheck_any_shape(N, D, K, seed):
    x = np.random.default_rng(seed).standard_normal((N, D))
    assert dl.gradcheck(dl.Linear(D, K, seed=seed), x, verbose=False) < 1e-6


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.integers(2, 6), st.integers(0, 2**16))
def test_softmax_rows_sum_to_one(N, K, seed):
    logits = np.random.default_rng(seed).standard_normal((N, K)) * 50
    p = dl.softmax(logits)
    assert np.allclose(p.sum(axis=1), 1) and (p >= 0).all()
