"""The passes of Conv2d and MaxPool2d split between threads (dlcourse/threaded.py, off unless
asked for) give the layers' own numbers, bit for bit: forward outputs, gradients, dx, caches,
and the parameters after optimizer steps, with the threads on and off. On a GPU the threaded
path never applies."""
import numpy as np
import pytest

import dlcourse as dl
from dlcourse import threaded
from dlcourse.layer_base import every_layer
from threadpoolctl import threadpool_limits


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def same_bits(a, b) -> bool:
    """Equal to the last bit, in the same shape (a NaN equals itself, -0.0 differs from 0.0)."""
    a, b = np.asarray(dl.to_numpy(a)), np.asarray(dl.to_numpy(b))
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.fixture
def parts(request, monkeypatch):
    """Split every pass, however small, into ``request.param`` parts (2 by default), whatever
    this machine's BLAS may use: the test then holds on a one-core CI runner too."""
    n = getattr(request, "param", 2)
    monkeypatch.setattr(threaded, "MIN_NUMBERS", 0)
    monkeypatch.setattr(threaded, "blas_threads", lambda: n)
    return n


@pytest.fixture
def splits(monkeypatch):
    """How many passes ran split: a list the wrapped ``threaded.split`` appends to."""
    calls = []
    real = threaded.split

    def counted(work, n):
        calls.append(n)
        return real(work, n)
    monkeypatch.setattr(threaded, "split", counted)
    return calls


MODELS = {
    "cnn": lambda dtype: dl.CNN(1, (12, 12), 5, seed=0, dtype=dtype),
    "cnn-batchnorm": lambda dtype: dl.CNN(2, (8, 8), 4, channels=(3, 5), batchnorm=True, seed=0,
                                          dtype=dtype),
    "cnn-1d": lambda dtype: dl.CNN(1, (1, 16), 3, kernel_size=(1, 5), pool=(1, 2), seed=0,
                                   dtype=dtype),
    # per-axis strides and paddings; overlapping (3, stride 2) and untiled pools
    "strided": lambda dtype: dl.Sequential(
        dl.Conv2d(2, 3, (3, 2), stride=(2, 1), padding=(1, 0), seed=0, dtype=dtype), dl.ReLU(),
        dl.MaxPool2d(3, 2), dl.Conv2d(3, 4, (2, 3), padding=(0, 2), seed=1, dtype=dtype),
        dl.Tanh(), dl.MaxPool2d(2), dl.Flatten(), dl.Linear(4 * 1 * 2, 3, seed=2, dtype=dtype)),
    "fused": lambda dtype: dl.fuse(dl.CNN(1, (12, 12), 5, seed=0, dtype=dtype)),
}
SHAPES = {"cnn": (1, 12, 12), "cnn-batchnorm": (2, 8, 8), "cnn-1d": (1, 1, 16),
          "strided": (2, 19, 7), "fused": (1, 12, 12)}


def train(name, dtype, threads: bool, steps=3, N=7):
    """``steps`` SGD steps (momentum, so a wrong gradient shows in every later step) of a model
    with non-zero biases; returns (model, the last logits, dL/dx of the last step)."""
    model = MODELS[name](dtype)
    for k, v in model.params.items():
        if k.endswith(".b"):
            v[...] = randn(*v.shape, seed=len(k)) * 0.3
    dl.use_threads(model, threads)
    loss, opt = dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.05, momentum=0.9)
    for step in range(steps):
        x = randn(N, *SHAPES[name], seed=step).astype(dtype)
        y = np.random.default_rng(step).integers(0, 3, N)
        logits = model.forward(x)
        loss.forward(logits, y)
        dx = model.backward(loss.backward())
        opt.step()
    return model, logits, dx


@pytest.mark.parametrize("parts", [2, 3], indirect=True)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", MODELS)
def test_a_training_step_on_threads_gives_the_layers_numbers_bit_for_bit(name, dtype, parts,
                                                                          splits):
    on, logits_on, dx_on = train(name, dtype, threads=True)
    assert splits, "the threaded path never ran"
    calls = len(splits)
    off, logits_off, dx_off = train(name, dtype, threads=False)
    assert len(splits) == calls, "use_threads(model, False) must keep every pass on one thread"
    assert same_bits(logits_on, logits_off) and same_bits(dx_on, dx_off)
    for key in off.params:
        assert same_bits(on.grads[key], off.grads[key]), f"grads[{key!r}]"
        assert same_bits(on.params[key], off.params[key]), f"params[{key!r}] after the updates"


def test_each_layer_keeps_the_cache_and_layouts_of_its_own_code(parts):
    """What a threaded forward keeps is what the layer's backward reads (so either backward may
    follow either forward), and each array has the layer's own memory layout."""
    x = randn(6, 3, 9, 9, seed=1).astype(np.float32)
    for layer in (dl.Conv2d(3, 4, 3, padding=1, seed=0), dl.Conv2d(3, 4, (3, 2), stride=2, seed=0),
                  dl.MaxPool2d(2), dl.MaxPool2d(3, 2)):
        layer.use_threads = True
        threaded_out = layer.forward(x)
        threaded_cache = layer.cache
        dout = randn(*threaded_out.shape, seed=2).astype(np.float32)
        threaded_dx = layer.backward(dout)
        layer.use_threads = False
        out = layer.forward(x)
        assert same_bits(threaded_out, out) and threaded_out.strides == out.strides
        for kept, own in zip(threaded_cache, layer.cache):
            if isinstance(own, np.ndarray):
                assert same_bits(kept, own) and kept.strides == own.strides
            else:
                assert kept == own
        dx = layer.backward(dout)
        assert same_bits(threaded_dx, dx) and threaded_dx.strides == dx.strides
        layer.use_threads = True
        layer.forward(x)
        layer.use_threads = False                         # threaded forward, own backward
        assert same_bits(layer.backward(dout), dx)


def test_a_conv_takes_a_gradient_in_either_layout(parts):
    """Conv2d.backward reads dout as (F, N*OH*OW): a view of a channel-major dout (what the
    layers above give), a copy of a C-contiguous one (a learner's own array)."""
    conv = dl.use_threads(dl.Conv2d(2, 3, 3, padding=1, seed=0))
    x = randn(5, 2, 6, 6, seed=1).astype(np.float32)
    conv.forward(x)
    dout = np.ascontiguousarray(randn(5, 3, 6, 6, seed=2).astype(np.float32))
    dx_threads, grads_threads = conv.backward(dout), dict(conv.grads)
    conv.use_threads = False
    assert same_bits(conv.backward(dout), dx_threads)
    for key in ("W", "b"):
        assert same_bits(conv.grads[key], grads_threads[key])


def test_fit_on_threads_trains_the_same_model_bit_for_bit(parts):
    X = randn(40, 1, 12, 12, seed=4).astype(np.float32)
    y = np.random.default_rng(4).integers(0, 5, 40)
    runs = []
    for threads in (True, False):
        model = dl.use_threads(dl.CNN(1, (12, 12), 5, seed=0), threads)
        history = dl.fit(model, dl.SoftmaxCrossEntropy(), dl.Adam(model, lr=1e-2), X, y,
                         epochs=2, batch_size=16, seed=0, progress=False)
        runs.append((model, history))
    (on, h_on), (off, h_off) = runs
    assert h_on.train_loss == h_off.train_loss
    assert all(same_bits(on.params[k], off.params[k]) for k in off.params)


def test_the_threads_are_used_only_where_they_pay(monkeypatch):
    """threads_for answers None (the layer's own code runs) for a switched-off layer, a batch
    too small, one sample, one BLAS thread, and inside a worker; else this module."""
    x = np.zeros((4, 16, 32, 32), np.float32)                  # 65,536 numbers
    monkeypatch.setattr(threaded, "blas_threads", lambda: 2)
    assert threaded.threads_for(x) is threaded
    assert threaded.threads_for(x, enabled=False) is None
    assert threaded.threads_for(x[:, :, :4]) is None            # fewer than MIN_NUMBERS
    assert threaded.threads_for(np.zeros((1, 2**16), np.float32)) is None    # one sample
    answers = []
    threaded.split(lambda lo, hi: answers.append(threaded.threads_for(x)), 2)
    assert answers == [None, None]                              # no threads inside a part
    assert threaded.threads_for(x) is threaded                  # ... and back after it
    monkeypatch.setattr(threaded, "blas_threads", lambda: 1)
    assert threaded.threads_for(x) is None


def test_off_by_default_and_with_one_blas_thread(splits):
    model = dl.CNN(1, (28, 28), 10, seed=0)
    x = randn(64, 1, 28, 28).astype(np.float32)
    model.backward(model.forward(x))
    assert splits == []                                          # off unless asked for
    dl.use_threads(model)
    with threadpool_limits(limits=1, user_api="blas"):
        assert threaded.blas_threads() == 1
        model.backward(model.forward(x))
    assert splits == []


def test_parts_cover_the_batch_in_order():
    assert threaded.parts_of(7, 3) == [(0, 2), (2, 4), (4, 7)]
    assert threaded.parts_of(2, 4) == [(0, 1), (1, 2)]          # never an empty part
    assert threaded.parts_of(5, 1) == [(0, 5)]


@pytest.mark.parametrize("chunks", [1, 3])
def test_split_runs_every_part_once_and_raises_an_error_after_all_have_finished(
        parts, chunks, monkeypatch):
    monkeypatch.setattr(threaded, "CHUNKS_PER_THREAD", chunks)
    done = []
    threaded.split(lambda lo, hi: done.append((lo, hi)), 12)
    assert sorted(done) == threaded.parts_of(12, 2 * chunks)
    finished = []

    def work(lo, hi):
        if lo == 0:
            raise ValueError("part 0 failed")
        finished.append(lo)
    with pytest.raises(ValueError, match="part 0 failed"):
        threaded.split(work, 12)
    assert sorted(finished) == [lo for lo, _ in threaded.parts_of(12, 2 * chunks)[1:]]


def test_use_threads_reaches_every_layer_and_the_one_inside_a_fused_layer():
    model = dl.fuse(dl.use_threads(dl.CNN(1, (12, 12), 5, seed=0)))
    dl.use_threads(model, False)
    switches = [layer.use_threads for layer in every_layer(model)
                if hasattr(layer, "use_threads")]
    assert len(switches) == 4 and not any(switches)              # 2 convs, 2 pools
    assert all(layer.use_threads for layer in dl.use_threads(model).layers
               if hasattr(layer, "use_threads"))


def test_on_the_gpu_the_threaded_path_does_not_apply(device, to_dev, monkeypatch, splits):
    """Written once for both backends: on NumPy the step splits its passes, on CuPy never (its
    kernels already use the whole device); the numbers are the layers' either way."""
    monkeypatch.setattr(threaded, "MIN_NUMBERS", 0)
    monkeypatch.setattr(threaded, "blas_threads", lambda: 2)
    model = dl.use_threads(dl.CNN(1, (12, 12), 5, seed=0).to(device))
    x = to_dev(randn(6, 1, 12, 12).astype(np.float32))
    assert (threaded.threads_for(x) is None) == (device == "gpu")
    out_on = model.forward(x)
    model.backward(out_on)
    grads_on = {k: v.copy() for k, v in model.grads.items()}
    assert bool(splits) == (device == "cpu")
    dl.use_threads(model, False)
    out_off = model.forward(x)
    model.backward(out_off)
    assert same_bits(out_on, out_off)
    assert all(same_bits(grads_on[k], model.grads[k]) for k in grads_on)
