"""dl.infer (dlcourse/fast_inference.py) gives the numbers model.eval().forward gives, on every
backend: each fast piece against the naive loops, the whole against the layer-by-layer forward."""
import numpy as np
import pytest

import dlcourse as dl
from dlcourse import conv, fast_inference
from threadpoolctl import threadpool_limits

from dlcourse.fast_inference import (Buffers, blas_threads, chunk_size, conv_step, fold_batchnorm,
                                     infer, plan, tiles, unfold_pooled, unfold_wide)


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _with_biases_and_statistics(model, seed=1):
    """Non-zero biases and BatchNorm statistics (a fresh model has zeros and ones, which would
    hide a bias added twice or a BatchNorm left out)."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        layer = getattr(layer, "layer", layer)
        if "b" in layer.params:
            layer.params["b"][...] = rng.standard_normal(layer.params["b"].shape) * 0.3
        if isinstance(layer, dl.BatchNorm2d):
            C = layer.num_features
            layer.params["gamma"][...] = rng.standard_normal(C)      # some scales negative
            layer.params["beta"][...] = rng.standard_normal(C)
            layer.buffers["running_mean"][...] = rng.standard_normal(C)
            layer.buffers["running_var"][...] = rng.uniform(0.5, 2.0, C)
    return model


MODELS = {
    "mlp": (lambda: dl.MLP([12, 16, 16, 3], dropout=0.5, seed=0), (12,)),
    "cnn": (lambda: dl.CNN(1, (10, 10), 4, channels=(3, 5), seed=0), (1, 10, 10)),
    # a first layer with more channels than columns (12 > 1*3*3) pools from pooling-ordered
    # columns; the second one's 5x5 output is not tiled by its 2x2 pool
    "cnn-pooled-columns": (lambda: dl.CNN(1, (10, 10), 4, channels=(12, 5), seed=0), (1, 10, 10)),
    "cnn-batchnorm": (lambda: dl.CNN(2, (8, 8), 4, channels=(3, 5), batchnorm=True, seed=0),
                      (2, 8, 8)),
    "cnn-1d": (lambda: dl.CNN(1, (1, 16), 3, kernel_size=(1, 5), pool=(1, 2), seed=0), (1, 1, 16)),
    "strided": (lambda: dl.Sequential(dl.Conv2d(2, 3, (3, 2), stride=(2, 1), padding=(1, 0), seed=0),
                                      dl.ReLU(), dl.Conv2d(3, 4, (2, 3), padding=(0, 2), seed=1),
                                      dl.MaxPool2d(3, 2), dl.Tanh(), dl.Flatten()), (2, 9, 7)),
}


@pytest.mark.parametrize("fused", [False, True], ids=["layers", "fused"])
@pytest.mark.parametrize("batch_size", [None, 1, 3])
@pytest.mark.parametrize("name", MODELS)
def test_infer_equals_forward_in_evaluation_mode(name, batch_size, fused, device, to_dev, xp):
    make, shape = MODELS[name]
    model = _with_biases_and_statistics(make()).to(device)
    model = dl.fuse(model) if fused else model
    x = to_dev(randn(7, *shape, seed=2).astype(np.float32))
    model.train()
    out = infer(model, x, batch_size)
    assert model.training, "infer must put the model's mode back"
    expected = model.eval().forward(x)
    assert dl.get_array_module(out) is xp and out.shape == expected.shape
    assert xp.allclose(out, expected, rtol=1e-5, atol=1e-5), float(abs(out - expected).max())
    assert not model.training and xp.allclose(dl.infer(model, x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_chunks_run_side_by_side_give_the_same_numbers(name, device, to_dev):
    """Workers change where a chunk runs, not what it computes: with one BLAS thread either
    way, three workers give exactly the numbers of one (on a GPU the batch goes in whole)."""
    make, shape = MODELS[name]
    model = _with_biases_and_statistics(make()).to(device).train()
    x = to_dev(randn(7, *shape, seed=2).astype(np.float32))
    with threadpool_limits(limits=1, user_api="blas"):
        assert blas_threads() == 1
        one = infer(model, x, batch_size=2)                     # 1 worker: BLAS's threads
        three = infer(model, x, batch_size=2, workers=3)        # 4 chunks on 3 threads
    assert model.training
    assert (one == three).all()


def test_reused_buffers_never_show_through(device, to_dev, xp):
    """The steps write into memory they keep (Buffers): what infer returns must not change when
    it runs again, on another batch or another model, and a model whose last step returns a
    kept array (conv-ReLU-pool: a view of the pooled values) must get a copy."""
    ends_in_conv = dl.Sequential(dl.Conv2d(1, 4, 3, padding=1, seed=0), dl.ReLU(),
                                 dl.MaxPool2d(2)).to(device)
    other = dl.CNN(1, (10, 10), 4, channels=(3, 5), seed=1).to(device)
    x1, x2 = (to_dev(randn(5, 1, 8, 8, seed=s).astype(np.float32)) for s in (1, 2))
    first = infer(ends_in_conv, x1, batch_size=2)
    chunk_of_one = infer(ends_in_conv, x1[:1])
    expected = ends_in_conv.forward(x1)
    infer(ends_in_conv, x2, batch_size=3)                      # other numbers, other chunk sizes
    infer(other, to_dev(randn(9, 1, 10, 10).astype(np.float32)))  # other shapes in the buffers
    assert xp.allclose(first, expected, rtol=1e-5, atol=1e-6)
    assert xp.allclose(chunk_of_one, expected[:1], rtol=1e-5, atol=1e-6)
    assert xp.allclose(infer(ends_in_conv, x1), expected, rtol=1e-5, atol=1e-6)


def test_buffers_reuse_memory_only_when_it_fits():
    buffers = Buffers()
    a = buffers.empty("cols", (4, 6), np.float32)
    assert np.shares_memory(buffers.empty("cols", (3, 5), np.float32), a)     # fits: reused
    assert not np.shares_memory(buffers.empty("z", (4, 6), np.float32), a)    # another name
    assert buffers.empty("cols", (5, 6), np.float32).shape == (5, 6)          # larger: new
    assert buffers.empty("cols", (2, 2), np.float64).dtype == np.float64      # other dtype: new
    assert (buffers.zeros("cols", (2, 3), np.float64) == 0).all()
    huge = buffers.empty("cols", (Buffers.KEEP_BYTES // 8 + 1,), np.float64)   # not kept
    assert not np.shares_memory(buffers.empty("cols", (1,), np.float64), huge)


def test_workers_give_the_blas_threads_back():
    before = blas_threads()
    infer(dl.CNN(1, (8, 8), 3, seed=0), np.ones((6, 1, 8, 8), np.float32), batch_size=1, workers=2)
    assert blas_threads() == before
    with pytest.raises(ValueError, match=r"infer\(workers=...\) must be a whole number >= 1"):
        infer(dl.MLP([4, 2]), np.zeros((2, 4), np.float32), workers=0)


def test_the_course_cnn_is_three_steps_and_its_order_does_not_round_differently():
    """conv-ReLU-pool twice, then Flatten and Linear; pooling before the bias and ReLU gives
    the very same float64 numbers (adding b and ReLU are non-decreasing)."""
    model = _with_biases_and_statistics(dl.CNN(1, (12, 12), 5, seed=0, dtype=np.float64))
    assert len(plan(model)) == 4          # conv block, conv block, Flatten, Linear
    x = randn(5, 1, 12, 12, seed=3)
    for c, pool in ((model.layers[0], model.layers[2]), (model.layers[3], model.layers[5])):
        fast = conv_step(c, relu=True, pool=pool)(x)   # pooling-ordered columns, then wide ones
        naive = conv.maxpool_forward_naive(
            np.maximum(conv.conv2d_forward_naive(x, c.params["W"], c.params["b"], 1, 1), 0), 2, 2, 2)
        np.testing.assert_allclose(fast, naive, rtol=1e-12, atol=1e-12)
        x = fast


@pytest.mark.parametrize("KH,KW,padding", [(3, 3, (1, 1)), (1, 5, (0, 2)), (2, 3, (0, 0)),
                                           (3, 1, (2, 0)), (1, 1, (0, 0))])
def test_unfold_wide_is_a_convolution(KH, KW, padding, device, to_dev, xp):
    """The wide columns' product, its wrapped columns dropped, is the naive convolution."""
    N, C, H, W, F = 3, 2, 6, 5, 4
    x, w, b = to_dev(randn(N, C, H, W, seed=1), randn(F, C, KH, KW, seed=2), randn(F, seed=3))
    cols, Wp = unfold_wide(x, KH, KW, padding)
    OH, OW = conv.output_size(H, W, KH, KW, 1, padding)
    assert cols.shape == (C * KH * KW, N * OH * Wp) and Wp == W + 2 * padding[1]
    out = (w.reshape(F, -1) @ cols).reshape(F, N, OH, Wp)[:, :, :, :OW].transpose(1, 0, 2, 3)
    expected = conv.conv2d_forward_naive(x, w, xp.zeros_like(b), 1, padding)
    assert xp.allclose(out, expected, atol=1e-12)


@pytest.mark.parametrize("KH,KW,padding,PH,PW", [(3, 3, (1, 1), 2, 2), (1, 5, (0, 2), 1, 2),
                                                 (2, 3, (1, 1), 3, 2), (3, 3, (0, 0), 1, 1)])
def test_unfold_pooled_gives_the_pooled_convolution(KH, KW, padding, PH, PW, device, to_dev, xp):
    """The product's PH*PW blocks, maxed, are the naive convolution then the naive pooling."""
    N, C, H, W, F = 2, 2, 8, 6, 3
    x, w = to_dev(randn(N, C, H, W, seed=1), randn(F, C, KH, KW, seed=2))
    OH, OW = conv.output_size(H, W, KH, KW, 1, padding)
    assert tiles(dl.MaxPool2d((PH, PW)), OH, OW)
    blocks = (w.reshape(F, -1) @ unfold_pooled(x, KH, KW, padding, PH, PW)).reshape(F, PH * PW, -1)
    pooled = blocks.max(axis=1).reshape(F, N, OH // PH, OW // PW).transpose(1, 0, 2, 3)
    z = conv.conv2d_forward_naive(x, w, xp.zeros(F), 1, padding)
    assert xp.allclose(pooled, conv.maxpool_forward_naive(z, PH, PW, (PH, PW)), atol=1e-12)


def test_tiles_says_whether_the_windows_cover_the_image_side_by_side():
    assert tiles(dl.MaxPool2d(2), 28, 28) and tiles(dl.MaxPool2d((1, 2)), 1, 40)
    assert not tiles(dl.MaxPool2d(2), 7, 8) and not tiles(dl.MaxPool2d(2, stride=1), 8, 8)


@pytest.mark.parametrize("kernel,stride", [((2, 2), 2), ((3, 3), 1), ((3, 2), (2, 1)),
                                           ((1, 1), 1), ((2, 3), 3)])
def test_maxpool_forward_equals_naive_on_a_channel_major_input(kernel, stride, to_dev, xp):
    """A conv's output is channel-major in memory: the fast pooling keeps that layout."""
    x = to_dev(randn(4, 3, 2, 8, 7, seed=4)[0]).transpose(1, 0, 2, 3)   # (N=3, C=2, 8, 7) view
    out = fast_inference.maxpool_forward(x, *kernel, stride)
    assert xp.array_equal(out, conv.maxpool_forward_naive(x, *kernel, stride))
    assert not np.shares_memory(dl.to_numpy(out), dl.to_numpy(x)) or xp is not np
    buffers = Buffers()                       # into kept arrays, as dl.infer pools: same maxima
    def new(name, shape):
        return buffers.empty(name, shape, x.dtype, xp)
    kept = fast_inference.maxpool_forward(x, *kernel, stride, new)
    assert xp.array_equal(kept, out)
    assert xp is not np or np.shares_memory(kept, buffers.arrays["pooled"])


def test_fold_batchnorm_is_conv_then_batchnorm():
    model = _with_biases_and_statistics(dl.CNN(2, (6, 6), 3, batchnorm=True, seed=0,
                                               dtype=np.float64)).eval()
    c, bn = model.layers[0], model.layers[1]
    x = randn(3, 2, 6, 6, seed=5)
    W, b = fold_batchnorm(c, bn)
    np.testing.assert_allclose(conv.conv2d_forward_naive(x, W, b, 1, 1),
                               bn.forward(c.forward(x)), rtol=1e-12, atol=1e-12)


def test_chunk_size_fits_the_largest_array_in_the_budget():
    cnn, mlp = dl.CNN(1, (28, 28), 10), dl.MLP([784, 512, 10])
    per_sample = 16 * 9 * 14 * 14 * 4          # the second conv's im2col columns, float32
    assert chunk_size(cnn, (1, 28, 28), budget=10 * per_sample) == 10
    assert chunk_size(mlp, (784,), budget=784 * 4 * 3) == 3
    assert chunk_size(cnn, (1, 28, 28), budget=1) == 1


def test_infer_refuses_what_forward_refuses():
    cnn = dl.CNN(1, (8, 8), 10)
    with pytest.raises(ValueError, match="built for 8×8 images"):
        infer(cnn, np.zeros((2, 1, 9, 9), np.float32))
    with pytest.raises(ValueError, match="axis 1 .channels. must be 1"):
        infer(cnn, np.zeros((2, 3, 8, 8), np.float32))
    with pytest.raises(TypeError, match="float32"):
        infer(dl.MLP([4, 2]), np.zeros((2, 4), np.float64))
    with pytest.raises(ValueError, match="at least one sample"):
        infer(dl.MLP([4, 2]), np.zeros((0, 4), np.float32))
    with pytest.raises(ValueError, match="batch_size"):
        infer(dl.MLP([4, 2]), np.zeros((2, 4), np.float32), batch_size=0)


def test_a_pool_of_its_own_keeps_only_the_maxima_and_equals_forward(device, to_dev):
    """A MaxPool2d that follows no convolution is its own step: the maxima alone (no record of
    where they were: no backward comes), the same numbers as the layer's forward."""
    model = dl.Sequential(dl.MaxPool2d(2), dl.Flatten(), dl.Linear(2 * 3 * 3, 4, seed=0)).to(device)
    x = to_dev(randn(5, 2, 6, 7, seed=3).astype(np.float32))
    pool = model[0]
    pool.clear_cache()
    out = dl.infer(model, x)
    assert pool.cache is None                       # the step did not run the layer's forward
    model.eval()
    assert float(abs(out - model.forward(x)).max()) < 1e-5
