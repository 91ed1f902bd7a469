"""The lesson 02a and 04-08 exercise checks: a right answer passes, and each common wrong answer
gets the message that names its mistake (also the wrong answers a mutation test found passing).

Each wrong answer is a small function named after its mistake, written as a learner would."""

import math
import time

import numpy as np
import pytest

import dlcourse as dl
import dlcourse.check as C
from dlcourse.check import convolution
from dlcourse.conv import (
    conv2d_backward_naive,
    conv2d_forward_naive,
    im2col,
    maxpool_backward_naive,
)
from support.expect import expect_fail, learner_copy



maxpool_mistakes = learner_copy(convolution.maxpool_mistakes)   # the check's wrong answers, copied
_conv_fwd = learner_copy(conv2d_forward_naive)
_conv_bwd = learner_copy(conv2d_backward_naive)
_pool_bwd = learner_copy(maxpool_backward_naive)


# ---- minibatches
def mb_good(X, y, batch_size, shuffle=True, seed=None):
    N = len(X)
    order = np.random.default_rng(seed).permutation(N) if shuffle else np.arange(N)
    for s in range(0, N, batch_size):
        idx = order[s : s + batch_size]
        yield (X[idx], y[idx])


def mb_nolast(X, y, batch_size, shuffle=True, seed=None):
    N = len(X)
    order = np.random.default_rng(seed).permutation(N) if shuffle else np.arange(N)
    for s in range(0, N - batch_size + 1, batch_size):
        idx = order[s : s + batch_size]
        yield (X[idx], y[idx])


def mb_unpaired(X, y, batch_size, shuffle=True, seed=None):
    N = len(X)
    r = np.random.default_rng(seed)
    o1 = r.permutation(N) if shuffle else np.arange(N)
    o2 = r.permutation(N) if shuffle else np.arange(N)
    for s in range(0, N, batch_size):
        yield (X[o1[s : s + batch_size]], y[o2[s : s + batch_size]])


def mb_noshuffle(X, y, batch_size, shuffle=True, seed=None):
    for s in range(0, len(X), batch_size):
        yield (X[s : s + batch_size], y[s : s + batch_size])


def mb_unseeded(X, y, batch_size, shuffle=True, seed=None):
    N = len(X)
    order = np.random.default_rng().permutation(N) if shuffle else np.arange(N)
    for s in range(0, N, batch_size):
        idx = order[s : s + batch_size]
        yield (X[idx], y[idx])


def mb_todo(X, y, batch_size, shuffle=True, seed=None):
    raise NotImplementedError("use rng.permutation")


def mb_other_shuffle(X, y, batch_size, shuffle=True, seed=None):  # the lesson: equally good
    N = len(X)
    order = np.random.default_rng(seed).choice(N, N, replace=False) if shuffle else np.arange(N)
    for s in range(0, N, batch_size):
        idx = order[s : s + batch_size]
        yield (X[idx], y[idx])


def mb_in_place(X, y, batch_size, shuffle=True, seed=None):  # reorders the caller's X and y
    if shuffle:
        np.random.default_rng(seed).shuffle(X)
        np.random.default_rng(seed).shuffle(y)
    for s in range(0, len(X), batch_size):
        yield (X[s : s + batch_size], y[s : s + batch_size])


def test_minibatches():
    C.iterate_minibatches(mb_good)
    C.iterate_minibatches(mb_other_shuffle)
    expect_fail(
        C.iterate_minibatches,
        mb_in_place,
        "shuffle=True",
        "changed its input X in place",
        "shuffle an index array, not the data",
        "a slice of it",
    )
    expect_fail(C.iterate_minibatches, mb_nolast, "last, smaller batch")
    expect_fail(C.iterate_minibatches, mb_unpaired, "SAME indices")
    expect_fail(C.iterate_minibatches, mb_noshuffle, "still came in order")
    expect_fail(C.iterate_minibatches, mb_unseeded, "different orders")
    expect_fail(C.iterate_minibatches, mb_todo, "not implemented yet: use rng.permutation")


def acc_good(logits, y):
    return float((logits.argmax(axis=1) == y).mean())


def acc_count(logits, y):
    return int((logits.argmax(axis=1) == y).sum())


def acc_sorts_y(logits, y):
    y.sort()
    return float((logits.argmax(axis=1) == y).mean())


def test_accuracy():
    C.accuracy(acc_good)
    expect_fail(C.accuracy, acc_count, "COUNT")
    expect_fail(C.accuracy, acc_sorts_y, "changed its input y in place")


def sgd_good(params, grads, velocity, lr, momentum):
    for k in params:
        velocity[k] *= momentum
        velocity[k] += grads[k]
        params[k] -= lr * velocity[k]


def sgd_rebind(params, grads, velocity, lr, momentum):
    for k in params:
        velocity[k] = momentum * velocity[k] + grads[k]
        params[k] = params[k] - lr * velocity[k]


def sgd_plain(params, grads, velocity, lr, momentum):
    for k in params:
        params[k] -= lr * grads[k]


def sgd_ema(params, grads, velocity, lr, momentum):
    for k in params:
        velocity[k] = momentum * velocity[k] + (1 - momentum) * grads[k]
        params[k] -= lr * velocity[k]


def sgd_reuses_grads(params, grads, velocity, lr, momentum):
    for k in params:
        g = grads[k]
        g += momentum * velocity[k]
        velocity[k][...] = g
        params[k] -= lr * g


def test_sgd():
    C.sgd_momentum_step(sgd_good)
    C.sgd_momentum_step(sgd_reuses_grads)
    expect_fail(C.sgd_momentum_step, sgd_rebind, "NEW array")
    expect_fail(C.sgd_momentum_step, sgd_plain, "plain SGD")
    C.sgd_momentum_step(sgd_cs)  # the lesson's other convention, consistently: passes
    expect_fail(C.sgd_momentum_step, sgd_ema, "averaged")
    expect_fail(C.sgd_momentum_step, sgd_switches_convention, "step 2 of 3", "Pick one for both")
    expect_fail(C.sgd_momentum_step, sgd_cs_fixed_lr_velocity, "step 2 of 3", "lr=0.05")
    expect_fail(C.sgd_momentum_step, sgd_library, "library's own version")


def fwd_good(X, W1, b1, W2, b2):
    return np.maximum(X @ W1 + b1, 0) @ W2 + b2


def fwd_loop(X, W1, b1, W2, b2):
    return np.stack([np.maximum(X[i] @ W1 + b1, 0) @ W2 + b2 for i in range(len(X))])


def fwd_loop2(X, W1, b1, W2, b2):
    return np.array([np.maximum(x @ W1 + b1, 0) @ W2 + b2 for x in X])


def fwd_norelu(X, W1, b1, W2, b2):
    return (X @ W1 + b1) @ W2 + b2


def fwd_float32(X, W1, b1, W2, b2):
    return fwd_good(X, W1, b1, W2, b2).astype(np.float32)


def fwd_centres_X(X, W1, b1, W2, b2):
    out = fwd_good(X, W1, b1, W2, b2)
    X -= 1.0
    return out


def test_fwd():
    C.mlp_forward_batched(fwd_good)
    expect_fail(
        C.mlp_forward_batched, fwd_float32, "the logits are float32", "float64 in gives float64 out"
    )
    expect_fail(C.mlp_forward_batched, fwd_centres_X, "changed its input X in place")
    expect_fail(
        C.mlp_forward_batched,
        fwd_loop,
        "row by row",
        "indexed 7 times (X[0], X[1], ...)",
        "write it for the whole batch",
    )
    expect_fail(C.mlp_forward_batched, fwd_loop2, "`for x in X`")
    expect_fail(C.mlp_forward_batched, fwd_norelu, "ReLU is missing")


def _one(x, W1, b1, W2, b2):
    return np.maximum(x @ W1 + b1, 0) @ W2 + b2


def fwd_loop_row(X, *p):
    return np.stack([_one(X[i, :], *p) for i in range(len(X))])


def fwd_loop_slice(X, *p):
    return np.concatenate([_one(X[i : i + 1], *p) for i in range(len(X))])


def fwd_loop_tolist(X, *p):
    return np.stack([_one(np.array(x), *p) for x in X.tolist()])


def fwd_loop_take(X, *p):
    return np.stack([_one(np.take(X, i, 0), *p) for i in range(len(X))])


def fwd_loop_apply(X, *p):
    return np.apply_along_axis(lambda x: _one(x, *p), 1, X)


def fwd_loop_asarray(X, *p):  # X itself is no longer watched: the weights, used N times, are
    A = np.asarray(X)
    return np.stack([_one(A[i], *p) for i in range(len(A))])


def fwd_loop_layer2(X, W1, b1, W2, b2):
    h = np.maximum(X @ W1 + b1, 0)
    return np.stack([h[i] @ W2 + b2 for i in range(len(h))])


@pytest.mark.parametrize(
    "fn, words",
    [
        (fwd_loop_row, ["X is indexed 7 times (X[0, :], X[1, :], ...)"]),
        (fwd_loop_slice, ["X is indexed 7 times (X[0:1], X[1:2], ...)"]),
        (fwd_loop_tolist, ["X.tolist()"]),
        (fwd_loop_take, ["np.take(X, 0), np.take(X, 1)"]),
        (fwd_loop_apply, ["np.apply_along_axis"]),
        (fwd_loop_asarray, ["W1 takes part in 7 separate operations", "a loop"]),
        (fwd_loop_layer2, ["W2 takes part in 7 separate operations"]),
    ],
)
def test_fwd_catches_every_per_sample_loop(fn, words):
    expect_fail(
        C.mlp_forward_batched,
        fn,
        "the numbers are right",
        *words,
        "write it for the whole batch, with no loop: one matrix product",
    )


def fwd_dot(X, W1, b1, W2, b2):
    return np.maximum(X.dot(W1) + b1, 0).dot(W2) + b2


def fwd_matmul(X, W1, b1, W2, b2):
    return np.matmul(np.maximum(np.matmul(X, W1) + b1, 0), W2) + b2


def fwd_einsum(X, W1, b1, W2, b2):
    return np.einsum("nh,hk->nk", np.maximum(np.einsum("nd,dh->nh", X, W1) + b1, 0), W2) + b2


def fwd_views(X, W1, b1, W2, b2):
    Xf = X.reshape(len(X), -1).astype(np.float64)[:, :]
    return np.maximum(W1.T @ Xf.T + b1[:, None], 0).T @ W2 + b2.reshape(1, -1)


def fwd_in_place(X, W1, b1, W2, b2):
    h = X @ W1
    h += b1
    h[h < 0] = 0
    out = h @ W2
    out += b2
    return out


def fwd_prints(X, W1, b1, W2, b2):
    print(X, W1, X.shape, X[0])
    return np.maximum(X @ W1 + b1, 0) @ W2 + b2


def fwd_bias_column(X, W1, b1, W2, b2):
    Xb = np.hstack([X, np.ones_like(X[:, :1])])
    return np.maximum(Xb @ np.vstack([W1, b1]), 0) @ W2 + b2


@pytest.mark.parametrize(
    "fn", [fwd_dot, fwd_matmul, fwd_einsum, fwd_views, fwd_in_place, fwd_prints, fwd_bias_column]
)
def test_fwd_accepts_every_batched_solution(fn):
    C.mlp_forward_batched(fn)


# ---- lesson 00 (00_setup_and_gpu_arrays): time_it, on the check's fake device and clock
def ti_good(fn, *, repeat=10, warmup=2, clock=time.perf_counter, wait=dl.synchronize):
    for _ in range(warmup):
        fn()
    wait()
    times = []
    for _ in range(repeat):
        t0 = clock()
        fn()
        wait()
        times.append(clock() - t0)
    return float(np.median(times))


def ti_sorted(fn, *, repeat=10, warmup=2, clock=time.perf_counter, wait=dl.synchronize):
    for _ in range(warmup):   # equally good: the middle of the sorted times (repeat is odd)
        fn()
        wait()
    times = []
    for _ in range(repeat):
        start = clock()
        fn()
        wait()
        times.append(clock() - start)
    return sorted(times)[len(times) // 2]


def _ti_times(fn, repeat, warmup, clock, wait, stat=np.median, sync_each=True,
              sync_after_warmup=True, time_warmup=False, sync_before=False):
    times = []
    for _ in range(warmup):
        t0 = clock()
        fn()
        if time_warmup:
            wait()
            times.append(clock() - t0)
    if sync_after_warmup:
        wait()
    for _ in range(repeat):
        if sync_before:
            wait()
        t0 = clock()
        fn()
        if sync_each:
            wait()
        times.append(clock() - t0)
    return float(stat(times))


def _ti(**mistake):
    def time_it(fn, *, repeat=10, warmup=2, clock=time.perf_counter, wait=dl.synchronize):
        return _ti_times(fn, repeat, warmup, clock, wait, **mistake)
    return time_it


def ti_no_sync(fn, *, repeat=10, warmup=2, clock=time.perf_counter, wait=dl.synchronize):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return float(np.median(times))


def ti_no_warmup(fn, *, repeat=10, warmup=2, clock=time.perf_counter, wait=dl.synchronize):
    return _ti_times(fn, repeat, 0, clock, wait)


def ti_whole_loop(fn, *, repeat=10, warmup=2, clock=time.perf_counter, wait=dl.synchronize):
    for _ in range(warmup):
        fn()
    wait()
    t0 = clock()
    for _ in range(repeat):
        fn()
    wait()
    return (clock() - t0) / repeat


def ti_own_clock_and_sync(fn, *, repeat=10, warmup=2, clock=time.perf_counter,
                          wait=dl.synchronize):     # ignores the clock it is given
    return _ti_times(fn, repeat, warmup, time.perf_counter, dl.synchronize)


def ti_own_sync(fn, *, repeat=10, warmup=2, clock=time.perf_counter, wait=dl.synchronize):
    return _ti_times(fn, repeat, warmup, clock, dl.synchronize)


def ti_milliseconds(fn, *, repeat=10, warmup=2, clock=time.perf_counter, wait=dl.synchronize):
    return 1e3 * ti_good(fn, repeat=repeat, warmup=warmup, clock=clock, wait=wait)


def ti_all_times(fn, *, repeat=10, warmup=2, clock=time.perf_counter, wait=dl.synchronize):
    return [ti_good(fn, repeat=1, warmup=warmup, clock=clock, wait=wait)] * repeat


def ti_library(fn, *, repeat=10, warmup=2, clock=time.perf_counter, wait=dl.synchronize):
    return dl.timeit(fn, repeat=repeat, warmup=warmup)


def test_time_it_passes_the_right_answers():
    C.time_it(ti_good)
    C.time_it(ti_sorted)


@pytest.mark.parametrize("fn, words", [
    (ti_no_sync, "never calls its wait argument"),
    (_ti(sync_each=False, sync_before=True), "QUEUE the work"),
    (_ti(stat=np.mean), "MEAN"), (_ti(stat=np.min), "the median"), (ti_no_warmup, "no warm-up"),
    (_ti(time_warmup=True), "warm-up calls are timed"),
    (_ti(sync_after_warmup=False), "synchronize after the warm-up"),
    (ti_whole_loop, "whole loop"), (ti_own_clock_and_sync, "never read the clock"),
    (ti_own_sync, "never calls its wait argument"),
    (ti_milliseconds, "milliseconds"), (ti_all_times, "one number"),
    (ti_library, "library's own version")])
def test_time_it_names_the_mistake(fn, words):
    expect_fail(C.time_it, fn, words)


# ---- lesson 04c (04c_initialization): dead ReLU units
def df_good(h):
    return float((h == 0).all(axis=0).mean())


def df_reshaped(h):                      # equally good: the units as one axis first
    xp = dl.get_array_module(h)
    return float(xp.mean(~(h != 0).reshape(len(h), -1).any(axis=0)))


def df_any(h):
    return float((h == 0).any(axis=0).mean())


def df_entries(h):
    return float((h == 0).mean())


def df_samples(h):
    return float((h == 0).reshape(len(h), -1).all(axis=1).mean())


def df_count(h):
    return int((h == 0).all(axis=0).sum())


def df_alive(h):
    return 1 - df_good(h)


def df_tolerance(h):
    return float((h < 1e-3).all(axis=0).mean())


def df_channels(h):
    z = h == 0
    return float(z.reshape(len(z), z.shape[1], -1).all(axis=(0, 2)).mean())


def df_negative(h):
    return float((h < 0).all(axis=0).mean())


def df_in_place(h):
    h[h > 0] = 1
    return float((h == 0).all(axis=0).mean())


def df_layer_stats(h):
    return dl.layer_stats(dl.Sequential(dl.ReLU()), h)[0]["dead"]


def test_dead_fraction_passes_the_right_answers():
    C.dead_fraction(df_good)
    C.dead_fraction(df_reshaped)


def test_dead_fraction_and_batch_requests_keep_a_cupy_case_on_the_gpu(device, capsys):
    """Where a GPU (or the CuPy stand-in) is there, each check runs one more case on CuPy arrays."""
    C.dead_fraction(df_good)
    C.batch_requests(br_good)
    out = capsys.readouterr().out
    assert out.count("(NumPy and CuPy)") == (2 if device == "gpu" else 0), out


@pytest.mark.parametrize("fn, words", [
    (df_any, "for SOME sample"), (df_entries, "fraction of all the entries"),
    (df_samples, "fraction of SAMPLES"), (df_count, "NUMBER of dead units"),
    (df_alive, "ALIVE"), (df_tolerance, "still alive"), (df_channels, "dead CHANNELS"),
    (df_negative, "never negative"), (df_in_place, "in place"),
    (df_layer_stats, "library's own version")])
def test_dead_fraction_names_the_mistake(fn, words):
    expect_fail(C.dead_fraction, fn, words)


# ---- lesson 05: micro-batching a service's requests
def br_good(requests, forward, max_batch):
    xp = dl.get_array_module(requests[0])
    X = xp.concatenate(requests)
    Y = xp.concatenate([forward(X[s:s + max_batch]) for s in range(0, len(X), max_batch)])
    ends = np.cumsum([0] + [len(q) for q in requests])
    return [Y[a:b] for a, b in zip(ends[:-1], ends[1:])]


def br_queue(requests, forward, max_batch):      # equally good: a queue of pieces, a tuple back
    pending = [(i, q) for i, q in enumerate(requests)]
    parts = {i: [] for i in range(len(requests))}
    while pending:
        batch, room = [], max_batch
        while pending and room:
            i, q = pending.pop(0)
            batch.append((i, q[:room]))
            if len(q) > room:
                pending.insert(0, (i, q[room:]))
            room -= min(room, len(q))
        out = forward(np.concatenate([q for _, q in batch]))
        k = 0
        for i, q in batch:
            parts[i].append(out[k:k + len(q)])
            k += len(q)
    return tuple(np.concatenate(parts[i]) for i in range(len(requests)))


def br_per_request(requests, forward, max_batch):
    return [forward(q) for q in requests]


def br_one_call(requests, forward, max_batch):
    Y = forward(np.concatenate(requests))
    ends = np.cumsum([0] + [len(q) for q in requests])
    return [Y[a:b] for a, b in zip(ends[:-1], ends[1:])]


def br_drop_last(requests, forward, max_batch):
    X = np.concatenate(requests)
    Y = np.concatenate([forward(X[s:s + max_batch])
                        for s in range(0, len(X) - max_batch + 1, max_batch)])
    ends = np.cumsum([0] + [len(q) for q in requests])
    return [Y[a:b] for a, b in zip(ends[:-1], ends[1:])]


def br_overlapping(requests, forward, max_batch):
    X = np.concatenate(requests)
    Y = np.concatenate([forward(X[s:s + max_batch])[:max_batch - 1]
                        for s in range(0, len(X), max_batch - 1)])
    ends = np.cumsum([0] + [len(q) for q in requests])
    return [Y[a:b] for a, b in zip(ends[:-1], ends[1:])]


def br_padded(requests, forward, max_batch):
    X = np.concatenate(requests)
    full = -(-len(X) // max_batch) * max_batch
    Xp = np.zeros((full, X.shape[1]))
    Xp[:len(X)] = X
    Y = np.concatenate([forward(Xp[s:s + max_batch]) for s in range(0, full, max_batch)])
    ends = np.cumsum([0] + [len(q) for q in requests])
    return [Y[a:b] for a, b in zip(ends[:-1], ends[1:])]


def br_whole_requests(requests, forward, max_batch):   # packs whole requests only
    out, batch = [], []

    def flush():
        if batch:
            Y = forward(np.concatenate(batch))
            k = 0
            for q in batch:
                out.append(Y[k:k + len(q)])
                k += len(q)
            batch.clear()
    for q in requests:
        if sum(len(b) for b in batch) + len(q) > max_batch:
            flush()
        if len(q) > max_batch:
            out.append(np.concatenate([forward(q[s:s + max_batch])
                                       for s in range(0, len(q), max_batch)]))
        else:
            batch.append(q)
    flush()
    return out


def br_joined(requests, forward, max_batch):
    X = np.concatenate(requests)
    return np.concatenate([forward(X[s:s + max_batch]) for s in range(0, len(X), max_batch)])


def br_per_batch(requests, forward, max_batch):
    X = np.concatenate(requests)
    return [forward(X[s:s + max_batch]) for s in range(0, len(X), max_batch)]


def br_split_at_sizes(requests, forward, max_batch):
    X = np.concatenate(requests)
    Y = np.concatenate([forward(X[s:s + max_batch]) for s in range(0, len(X), max_batch)])
    return np.split(Y, [len(q) for q in requests][:-1])


def br_reversed(requests, forward, max_batch):
    return br_good(requests, forward, max_batch)[::-1]


def test_batch_requests_passes_the_right_answers():
    C.batch_requests(br_good)
    C.batch_requests(br_queue)


@pytest.mark.parametrize("fn, words", [
    (br_per_request, "one call per request"), (br_one_call, "a batch of 9 samples"),
    (br_drop_last, "last, partial batch"), (br_overlapping, "went through forward 2 times"),
    (br_padded, "no request's samples"), (br_whole_requests, "may be split"),
    (br_joined, "one per request"), (br_per_batch, "expected (3, 3)"),
    (br_split_at_sizes, "running total"), (br_reversed, "another order")])
def test_batch_requests_names_the_mistake(fn, words):
    expect_fail(C.batch_requests, fn, words)


def cos_good(H, K, stride=1, padding=0):
    return (H + 2 * padding - K) // stride + 1


def cos_noplus(H, K, stride=1, padding=0):
    return (H + 2 * padding - K) // stride


def cos_div(H, K, stride=1, padding=0):
    return (H + 2 * padding - K) / stride + 1


def cos_pad1(H, K, stride=1, padding=0):
    return (H + padding - K) // stride + 1


def test_cos():
    C.conv_output_size(cos_good)
    expect_fail(C.conv_output_size, cos_noplus, "+ 1")
    expect_fail(C.conv_output_size, cos_div, "//")
    expect_fail(C.conv_output_size, cos_pad1, "BOTH")
    expect_fail(C.conv_output_size, lambda H, K, stride=1, padding=0: int((H + 2 * padding - K) /
                stride) + 1, "H=2, K=3", "round DOWN")


def conv_good(x, W, b, stride=1, padding=0):
    return _conv_fwd(x, W, b, stride, padding)


def conv_flip(x, W, b, stride=1, padding=0):
    return _conv_fwd(x, W[:, :, ::-1, ::-1], b, stride, padding)


def conv_nob(x, W, b, stride=1, padding=0):
    return _conv_fwd(x, W, 0 * b, stride, padding)


def conv_nopad(x, W, b, stride=1, padding=0):
    return _conv_fwd(x, W, b, stride, 0)


def test_conv():
    C.conv2d_naive(conv_good)
    expect_fail(C.conv2d_naive, lambda x, W, b, stride=1, padding=0: conv2d_forward_naive(
        x, W, b, stride, padding), "dl.conv.conv2d_forward_naive", "library's own version")
    expect_fail(C.conv2d_naive, conv_flip, "flipped")
    expect_fail(C.conv2d_naive, conv_nob, "bias")
    expect_fail(C.conv2d_naive, conv_nopad, "OH =")


def _im2col(x, KH, KW):  # the learner's loops (dl.im2col is refused while the check runs)
    N, C, H, W = x.shape
    OH, OW = (H - KH + 1, W - KW + 1)
    return np.array([x[n, :, i : i + KH, j : j + KW].reshape(-1)
                     for n in range(N) for i in range(OH) for j in range(OW)])


def i2c_good(x, KH, KW):
    return _im2col(x, KH, KW)


def i2c_T(x, KH, KW):
    return _im2col(x, KH, KW).T


def i2c_library(x, KH, KW):
    return im2col(x, KH, KW)


def i2c_cols(x, KH, KW):
    N, C, H, W = x.shape
    OH, OW = (H - KH + 1, W - KW + 1)
    return np.array(
        [
            x[n, :, i : i + KH, j : j + KW].transpose(1, 2, 0).reshape(-1)
            for n in range(N)
            for i in range(OH)
            for j in range(OW)
        ]
    )


def i2c_rows(x, KH, KW):
    N, C, H, W = x.shape
    OH, OW = (H - KH + 1, W - KW + 1)
    return np.array(
        [
            x[n, :, i : i + KH, j : j + KW].reshape(-1)
            for i in range(OH)
            for j in range(OW)
            for n in range(N)
        ]
    )


def test_i2c():
    C.im2col_simple(i2c_good)
    expect_fail(C.im2col_simple, i2c_T, "transpose")
    expect_fail(C.im2col_simple, i2c_library, "library's own version")
    expect_fail(C.im2col_simple, i2c_cols, "c, then kh")
    expect_fail(C.im2col_simple, i2c_rows, "n, then i")


def cb_good(dout, x, W, stride=1, padding=0):
    return _conv_bwd(dout, x, W, stride, padding)


def cb_pad(dout, x, W, stride=1, padding=0):
    dx, dW, db = _conv_bwd(dout, x, W, stride, padding)
    return (np.pad(dx, ((0, 0), (0, 0), (padding,) * 2, (padding,) * 2)), dW, db)


def cb_db(dout, x, W, stride=1, padding=0):
    dx, dW, db = _conv_bwd(dout, x, W, stride, padding)
    return (dx, dW, dout.sum(axis=(0,)))


def test_cb():
    C.conv2d_backward(cb_good)
    expect_fail(C.conv2d_backward, lambda dout, x, W, stride=1, padding=0: conv2d_backward_naive(
        dout, x, W, stride, padding), "library's own version")
    expect_fail(C.conv2d_backward, cb_pad, "crop")
    expect_fail(C.conv2d_backward, cb_db, "db")


def mp_good(dout, x, K, stride):
    return _pool_bwd(dout, x, K, K, stride)


def mp_over(dout, x, K, stride):
    return maxpool_mistakes(dout, x, K, stride)[2]


def mp_spread(dout, x, K, stride):
    return maxpool_mistakes(dout, x, K, stride)[0]


def _mp_loop(dout, x, K, stride, pick):
    dx = np.zeros_like(x)
    N, C_, _, _ = x.shape
    for n in range(N):
        for c in range(C_):
            for i in range(dout.shape[2]):
                for j in range(dout.shape[3]):
                    win = x[n, c, i * stride : i * stride + K, j * stride : j * stride + K]
                    dx[n, c, i * stride : i * stride + K, j * stride : j * stride + K] += (
                        pick(win) * dout[n, c, i, j]
                    )
    return dx


def mp_mask(dout, x, K, stride):  # CS231n-style: every tied maximum gets dout
    return _mp_loop(dout, x, K, stride, lambda w: w == w.max())


def mp_last(dout, x, K, stride):  # a search loop with >=: the last tied maximum

    def last(w):
        m = np.zeros(w.shape)
        m.flat[w.size - 1 - w.ravel()[::-1].argmax()] = 1
        return m

    return _mp_loop(dout, x, K, stride, last)


def mp_first_mask(dout, x, K, stride):  # right: a mask that keeps the first maximum only

    def first(w):
        m = (w == w.max()).ravel()
        return (m & (np.cumsum(m) == 1)).reshape(w.shape)

    return _mp_loop(dout, x, K, stride, first)


def test_mp():
    C.maxpool_backward(mp_good)
    expect_fail(C.maxpool_backward, lambda dout, x, K, stride: maxpool_backward_naive(
        dout, x, K, K, stride), "library's own version")
    C.maxpool_backward(mp_first_mask)
    expect_fail(C.maxpool_backward, mp_over, "ADD")
    expect_fail(C.maxpool_backward, mp_spread, "every pixel")
    for wrong, words in (
        (mp_mask, ["EVERY one of them", "Exactly one position gets it"]),
        (mp_last, ["the LAST one", "(>, not >=)"]),
    ):
        expect_fail(
            C.maxpool_backward,
            wrong,
            "x after a ReLU",
            *words,
            "the FIRST maximum in row-major order of the window (row by row, left to right)",
            "dl.MaxPool2d",
        )


def cp_good(a, b, k):
    return b * a * k * k + b


def cp_nob(a, b, k):
    return b * a * k * k


def test_cp():
    C.conv_params(cp_good)
    expect_fail(C.conv_params, cp_nob, "biases")


def bn_good(x, gamma, beta, eps=1e-05):
    m = x.mean(axis=(0, 2, 3), keepdims=True)
    v = x.var(axis=(0, 2, 3), keepdims=True)
    return gamma.reshape(1, -1, 1, 1) * (x - m) / np.sqrt(v + eps) + beta.reshape(1, -1, 1, 1)


def bn_ddof(x, gamma, beta, eps=1e-05):
    m = x.mean(axis=(0, 2, 3), keepdims=True)
    v = x.var(axis=(0, 2, 3), keepdims=True, ddof=1)
    return gamma.reshape(1, -1, 1, 1) * (x - m) / np.sqrt(v + eps) + beta.reshape(1, -1, 1, 1)


def bn_inst(x, gamma, beta, eps=1e-05):
    m = x.mean(axis=(2, 3), keepdims=True)
    v = x.var(axis=(2, 3), keepdims=True)
    return gamma.reshape(1, -1, 1, 1) * (x - m) / np.sqrt(v + eps) + beta.reshape(1, -1, 1, 1)


def bn_bcast(x, gamma, beta, eps=1e-05):
    m = x.mean(axis=(0, 2, 3), keepdims=True)
    v = x.var(axis=(0, 2, 3), keepdims=True)
    return gamma * (x - m) / np.sqrt(v + eps) + beta


def bn_no_eps(x, gamma, beta, eps=1e-05):
    m = x.mean(axis=(0, 2, 3), keepdims=True)
    v = x.var(axis=(0, 2, 3), keepdims=True)
    return gamma.reshape(1, -1, 1, 1) * (x - m) / np.sqrt(v) + beta.reshape(1, -1, 1, 1)


def bn_eps_outside(x, gamma, beta, eps=1e-05):
    m = x.mean(axis=(0, 2, 3), keepdims=True)
    v = x.var(axis=(0, 2, 3), keepdims=True)
    return gamma.reshape(1, -1, 1, 1) * (x - m) / (np.sqrt(v) + eps) + beta.reshape(1, -1, 1, 1)


def bn_fixed_eps(x, gamma, beta, eps=1e-05):  # ignores the eps it is given
    return bn_good(x, gamma, beta, 1e-5)


def bn_in_place(x, gamma, beta, eps=1e-05):
    x -= x.mean(axis=(0, 2, 3), keepdims=True)
    x /= np.sqrt(x.var(axis=(0, 2, 3), keepdims=True) + eps)
    return gamma.reshape(1, -1, 1, 1) * x + beta.reshape(1, -1, 1, 1)


def test_bn():
    C.batchnorm_forward(bn_good)
    expect_fail(C.batchnorm_forward, bn_no_eps, "eps is missing")
    expect_fail(C.batchnorm_forward, bn_fixed_eps, "eps=0.001", "use the eps argument")
    expect_fail(
        C.batchnorm_forward,
        bn_eps_outside,
        "channel 1 nearly constant",
        "INSIDE the square root: sqrt(var + eps), not sqrt(var) + eps",
    )
    expect_fail(C.batchnorm_forward, bn_in_place, "changed its input x in place")
    expect_fail(C.batchnorm_forward, bn_ddof, "biased")
    expect_fail(C.batchnorm_forward, bn_inst, "each image")
    expect_fail(C.batchnorm_forward, bn_bcast, "broadcast")


def sgd_cs(params, grads, velocity, lr, momentum):
    for k in params:
        velocity[k] *= momentum
        velocity[k] -= lr * grads[k]
        params[k] += velocity[k]


_own = {}


def sgd_switches_convention(params, grads, velocity, lr, momentum):
    # right parameters (PyTorch's way, from a velocity of its own), but the velocity it stores
    # is PyTorch's at odd steps and the other convention's at even ones: with a constant lr
    # each step's velocity fits one of the two conventions, so only consistency catches it
    if not any(v.any() for v in velocity.values()):
        _own.clear()
        _own.update(t=0, v={k: np.zeros_like(p) for k, p in params.items()})
    _own["t"] += 1
    for k in params:
        _own["v"][k] = momentum * _own["v"][k] + grads[k]
        params[k] -= lr * _own["v"][k]
        velocity[k][...] = _own["v"][k] if _own["t"] % 2 else -lr * _own["v"][k]


def sgd_cs_fixed_lr_velocity(params, grads, velocity, lr, momentum):
    # the other convention, but the velocity scaled by the FIRST step's lr only
    for k in params:
        velocity[k] *= momentum
        velocity[k] -= 0.1 * grads[k] if lr in (0.1, 0.05, 0.2) else lr * grads[k]
        params[k] += velocity[k] * (lr / 0.1 if lr in (0.1, 0.05, 0.2) else 1)


def sgd_library(params, grads, velocity, lr, momentum):
    class Model:
        pass
    m = Model()
    m.params, m.grads = params, grads
    opt = dl.SGD(m, lr=lr, momentum=momentum)
    opt.state = velocity
    opt.step()


# ---- lessons 08a and 08b (08a_gpu_execution_and_memory, 08b_tiling_and_roofline)
def gs_good(n, block):
    return (n + block - 1) // block


def gs_round(n, block):
    return round(n / block + 0.5)


def gs_999(n, block):
    return int(n / block + 0.999)


def gs_at_least_one(n, block):
    return max(1, (n + block - 1) // block)


def test_grid_size():
    C.grid_size(gs_good)
    expect_fail(
        C.grid_size,
        gs_round,
        "n=768",
        "one block too many",
        "round(n / block + 0.5)",
        "an exact multiple",
    )
    expect_fail(C.grid_size, gs_999, "n=1025", "the last 1 element(s) get none", "Adding 0.999")
    expect_fail(C.grid_size, gs_at_least_one, "n=0", "no element needs a thread", "max(1, ...)")
    expect_fail(C.grid_size, lambda n, block: math.ceil(n / block), "n=1152921504606846977",
                "FLOATING POINT")


def test_global_index():
    C.global_index(lambda b, d, t: b * d + t)
    expect_fail(C.global_index, lambda b, d, t: t * d + b, "block_idx=0", "THREAD index")
    expect_fail(C.global_index, lambda b, d, t: b + t, "block_idx=3", "block_dim threads, not one")
    def blocks_always_rows(b, d, t):   # right for ints, but puts the blocks on the rows
        if np.ndim(b) == 0:
            return b * d + t
        return np.ravel(b)[:, None] * d + np.ravel(t)[None, :]
    expect_fail(C.global_index, blocks_always_rows, "blocks along the columns", "broadcasts")


def wt_good(addresses, segment_bytes=32):
    return len(np.unique(np.asarray(addresses) // segment_bytes))


def wt_range(addresses, segment_bytes=32):
    return int((addresses.max() - addresses.min()) // segment_bytes + 1)


def wt_elements(addresses, segment_bytes=32):
    return len(np.unique(addresses // 4 // segment_bytes))


def wt_sorts(addresses, segment_bytes=32):
    addresses.sort()
    return wt_good(addresses, segment_bytes)


def test_warp_transactions():
    C.warp_transactions(wt_good)
    expect_fail(
        C.warp_transactions,
        wt_range,
        "starting at byte 64",
        "address RANGE (max - min)",
        "Count the segments the threads touch, each once",
    )
    expect_fail(C.warp_transactions, wt_elements, "32 consecutive float64", "already in BYTES")
    expect_fail(C.warp_transactions, wt_sorts, "changed its input addresses in place")


def tm_good(A, B, tile):
    M, K = A.shape
    N = B.shape[1]
    C_ = np.zeros((M, N))
    for i0 in range(0, M, tile):
        for j0 in range(0, N, tile):
            for k0 in range(0, K, tile):
                a = A[i0 : i0 + tile, k0 : k0 + tile]
                b = B[k0 : k0 + tile, j0 : j0 + tile]
                C_[i0 : i0 + tile, j0 : j0 + tile] += a @ b
    return C_


def tm_whole(A, B, tile):
    return A @ B


def tm_scales_A(A, B, tile):  # the right C, but A is used as scratch space afterwards
    C_ = tm_good(A, B, tile)
    A[:] = 0.0
    return C_


def test_tiled_matmul():
    C.tiled_matmul(tm_good)
    expect_fail(C.tiled_matmul, tm_scales_A, "changed its input A in place", "never write into A")
    expect_fail(C.tiled_matmul, tm_whole, "the whole matrices were multiplied")


# ---- lesson 02a (02a_loss_and_softmax): the softmax cross-entropy gradient
def _softmax(z):  # the learner's own (dl.softmax is refused while the check runs)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def sce_good(logits, labels):
    N = len(labels)
    p = _softmax(logits).copy()
    p[np.arange(N), labels] -= 1
    return p / N


def sce_every_label(logits, labels):
    p = _softmax(logits).copy()
    p[:, labels] -= 1
    return p / len(labels)


def sce_no_mean(logits, labels):
    return sce_good(logits, labels) * len(labels)


def sce_whole_array(logits, labels):
    N = len(labels)
    e = np.exp(logits - logits.max())
    p = e / e.sum()
    p[np.arange(N), labels] -= 1
    return p / N


def test_softmax_ce_grad():
    C.softmax_ce_grad(sce_good)
    expect_fail(C.softmax_ce_grad, sce_every_label, "p[:, labels] -= 1", "two index arrays")
    expect_fail(C.softmax_ce_grad, sce_no_mean, "times too large")
    expect_fail(C.softmax_ce_grad, sce_whole_array, "whole array")


# ---- lesson 04b: inverted dropout
def do_good(x, p, rng):
    mask = (rng.random(x.shape) >= p) / (1 - p)
    return x * mask, mask


def do_unscaled(x, p, rng):
    mask = (rng.random(x.shape) >= p).astype(float)
    return x * mask, mask


def do_keep_p(x, p, rng):
    mask = (rng.random(x.shape) < p) / (1 - p)
    return x * mask, mask


def do_scaled_down(x, p, rng):
    mask = (rng.random(x.shape) >= p) * (1 - p)
    return x * mask, mask


def do_keep_below(x, p, rng):  # the other half of the uniform numbers: equally good
    mask = (rng.random(x.shape) < 1 - p) / (1 - p)
    return x * mask, mask


def do_global(x, p, rng):  # NumPy's global generator, not the one it is given
    mask = (np.random.random(x.shape) >= p) / (1 - p)
    return x * mask, mask


def do_own_generator(x, p, rng):  # a fixed generator of its own
    mask = (np.random.default_rng(0).random(x.shape) >= p) / (1 - p)
    return x * mask, mask


def do_returns_mask(x, p, rng):
    mask = (rng.random(x.shape) >= p) / (1 - p)
    return mask, mask


def do_library(x, p, rng):
    layer = dl.Dropout(p)
    return layer.forward(x), layer.cache


def test_dropout_forward():
    C.dropout_forward(do_good)
    C.dropout_forward(do_keep_below)
    expect_fail(C.dropout_forward, do_global, "not the entries", "rng was not used at all",
                "not from np.random")
    expect_fail(C.dropout_forward, do_own_generator, "rng was not used at all")
    expect_fail(C.dropout_forward, do_returns_mask, "out is the mask itself")
    expect_fail(C.dropout_forward, do_library, "it calls dl.Dropout,", "library's own version")
    expect_fail(C.dropout_forward, do_unscaled, "not scaled", "inverted")
    expect_fail(C.dropout_forward, do_keep_p, "probability to DROP")
    expect_fail(C.dropout_forward, do_scaled_down, "scaled UP")


def test_dropout_backward():
    C.dropout_backward(lambda dout, mask: dout * mask)
    expect_fail(C.dropout_backward, lambda dout, mask: dout, "multiply by the mask")
    expect_fail(C.dropout_backward, lambda dout, mask: dout * (mask != 0), "the scaled mask")


# ---- lesson 07: BatchNorm backward
def _bn_parts(x, eps=1e-5, axes=(0, 2, 3)):
    mean = x.mean(axis=axes, keepdims=True)
    std = np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    return (x - mean) / std, std


def bnb_good(dout, x, gamma, eps=1e-5, axes=(0, 2, 3), mean_path=True, var_path=True):
    x_hat, std = _bn_parts(x, eps, axes)
    d = dout * gamma.reshape(1, -1, 1, 1)
    dx = d
    if mean_path:
        dx = dx - d.mean(axis=axes, keepdims=True)
    if var_path:
        dx = dx - x_hat * (d * x_hat).mean(axis=axes, keepdims=True)
    x_hat, _ = _bn_parts(x, eps)
    return dx / std, (dout * x_hat).sum(axis=(0, 2, 3)), dout.sum(axis=(0, 2, 3))


def bnb_direct_only(dout, x, gamma, eps=1e-5):
    return bnb_good(dout, x, gamma, eps, mean_path=False, var_path=False)


def bnb_no_var_path(dout, x, gamma, eps=1e-5):
    return bnb_good(dout, x, gamma, eps, var_path=False)


def bnb_no_mean_path(dout, x, gamma, eps=1e-5):
    return bnb_good(dout, x, gamma, eps, mean_path=False)


def bnb_image_axes(dout, x, gamma, eps=1e-5):
    return bnb_good(dout, x, gamma, eps, axes=(2, 3))


def bnb_dgamma_without_x_hat(dout, x, gamma, eps=1e-5):
    dx, _, dbeta = bnb_good(dout, x, gamma, eps)
    return dx, dout.sum(axis=(0, 2, 3)), dbeta


def test_batchnorm_backward():
    C.batchnorm_backward(bnb_good)
    expect_fail(C.batchnorm_backward, bnb_direct_only, "only the direct path")
    expect_fail(C.batchnorm_backward, bnb_no_var_path, "variance's path is missing")
    expect_fail(C.batchnorm_backward, bnb_no_mean_path, "mean's path is missing")
    expect_fail(C.batchnorm_backward, bnb_image_axes, "axes (2, 3) only")
    expect_fail(C.batchnorm_backward, bnb_dgamma_without_x_hat, "x_hat")
    expect_fail(C.batchnorm_backward, lambda dout, x, gamma, eps=1e-5: bnb_good(dout, x, gamma),
                "eps=0.1", "use the eps argument")


# ---- lesson 08d (08d_fusion_and_graphs)
def brb_good(dout, y):
    dx = dout * (y > 0)
    return dx, dx.sum(axis=0)


def brb_mask_from_dout(dout, y):
    dx = dout * (dout > 0)
    return dx, dx.sum(axis=0)


def brb_unmasked_db(dout, y):
    return dout * (y > 0), dout.sum(axis=0)


def brb_mean(dout, y):
    dx = dout * (y > 0)
    return dx, dx.mean(axis=0)


def brb_in_place(dout, y):
    dout[y <= 0] = 0
    return dout, dout.sum(axis=0)


def test_bias_relu_backward_passes_the_right_answer():
    C.bias_relu_backward(brb_good)


@pytest.mark.parametrize("fn, words", [
    (brb_mask_from_dout, "OUTPUT y"), (brb_unmasked_db, "MASKED gradient"), (brb_mean, "SUM over"),
    (brb_in_place, "in place"), (lambda dout, y: dout * (y > 0), "2 values")])
def test_bias_relu_backward_names_the_mistake(fn, words):
    expect_fail(C.bias_relu_backward, fn, words)


def lps_good(layers, per_call, loss, update):
    costs = [per_call[name] for name in layers]
    first = next(i for i, c in enumerate(costs) if c["params"])
    n = sum(c["forward"] for c in costs) + loss
    n += sum(c["backward"] for c in costs[first:]) - costs[first]["dx"]
    return n + update * sum(c["params"] for c in costs)


def lps_walk_back(layers, per_call, loss, update):   # equally good: backward as Sequential runs it
    n = loss
    for name in layers:
        n += per_call[name]["forward"] + update * per_call[name]["params"]
    for i in range(len(layers) - 1, -1, -1):
        c = per_call[layers[i]]
        if c["params"] and not any(per_call[m]["params"] for m in layers[:i]):
            return n + c["backward"] - c["dx"]
        n += c["backward"]
    return n


def _lps(layers, per_call, loss, update, skip, update_per=lambda c: c["params"], fwd=True):
    costs = [per_call[name] for name in layers]
    n = loss + sum(c["forward"] for c in costs) * fwd + sum(update * update_per(c) for c in costs)
    return n + sum(c["backward"] for c in costs) - skip(costs)


def lps_no_backward(layers, per_call, loss, update):
    return _lps(layers, per_call, loss, update, lambda cs: sum(c["backward"] for c in cs))


def lps_full_backward(layers, per_call, loss, update):
    return _lps(layers, per_call, loss, update, lambda cs: 0)


def lps_runs_the_layers_before(layers, per_call, loss, update):
    return _lps(layers, per_call, loss, update,
                lambda cs: next(c["dx"] for c in cs if c["params"]))


def lps_skips_layer_zero(layers, per_call, loss, update):
    return _lps(layers, per_call, loss, update, lambda cs: cs[0]["dx"])


def lps_update_per_layer(layers, per_call, loss, update):
    return lps_good(layers, per_call, loss, 0) + update * sum(
        1 for name in layers if per_call[name]["params"])


def lps_update_every_layer(layers, per_call, loss, update):
    return lps_good(layers, per_call, loss, 0) + update * len(layers)


def lps_no_update(layers, per_call, loss, update):
    return lps_good(layers, per_call, loss, 0)


def lps_no_loss(layers, per_call, loss, update):
    return lps_good(layers, per_call, 0, update)


def lps_no_forward(layers, per_call, loss, update):
    return lps_good(layers, per_call, loss, update) - sum(per_call[n]["forward"] for n in layers)


def test_launches_per_step_passes_the_right_answers():
    C.launches_per_step(lps_good)
    C.launches_per_step(lps_walk_back)


@pytest.mark.parametrize("fn, words", [
    (lps_no_backward, "leaves the backward pass out"), (lps_full_backward, "in full"),
    (lps_runs_the_layers_before, "do not run backward at all"),
    (lps_skips_layer_zero, "WITH PARAMETERS"), (lps_update_per_layer, "parameter ARRAY"),
    (lps_update_every_layer, "only layers with parameters"), (lps_no_update, "update is missing"),
    (lps_no_loss, "loss is missing"), (lps_no_forward, "forward pass is missing"),
    (lambda layers, per_call, loss, update: lps_good(layers, per_call, loss, update) / 3,
     "a fraction")])
def test_launches_per_step_names_the_mistake(fn, words):
    expect_fail(C.launches_per_step, fn, words)


@pytest.fixture(scope="module")
def emulated_kernels(tmp_path_factory):
    """dlcourse.kernels on the CUDA kernels compiled as C++ (tests/support/cuda_emulator.py),
    where g++ is on the PATH: every array counts as a GPU one and counts its launches."""
    import sys
    emulator = pytest.importorskip("support.cuda_emulator")
    if emulator.GXX is None or not sys.platform.startswith("linux"):
        pytest.skip("the CUDA kernels are emulated only on Linux with g++ on the PATH")
    return emulator, emulator.compile_kernels(tmp_path_factory.mktemp("launch_count"),
                                              emulator.all_sources())


def test_launches_of_the_cnn_step_are_what_lesson_08d_prints(emulated_kernels, monkeypatch):
    """Lesson 08d's exercise 7 counts a training step's launches from a table of launches per
    call (GPU_LAUNCHES here, LAUNCHES there), and prints the counts for the MLP, dl.CNN and
    dl.fuse(dl.CNN()); nbval checks that output. Count them here on the emulated GPU: every
    array operation and every launch of our kernels, with SGD's fused update and as array code."""
    import json
    import re
    from pathlib import Path

    import dlcourse.kernels as K
    emulator, emu = emulated_kernels
    monkeypatch.setattr(K._build, "device_of", lambda a: "gpu")
    monkeypatch.setattr(K, "device_of", lambda a: "gpu")
    monkeypatch.setattr(K, "gpu_available", lambda: True)
    for module in (K.matmul, K.fused, K.unfold):
        monkeypatch.setattr(module, "require_cupy", lambda: emulator.FAKE_CUPY)
        monkeypatch.setattr(module, "get_kernel",
                            lambda f, n, defines=(): emulator.emulated_kernel(emu, f, n))
    path = Path(__file__).parents[1] / "notebooks" / "08d_fusion_and_graphs.ipynb"
    text = "".join("".join(o.get("text", "")) for c in json.loads(path.read_text())["cells"]
                   for o in c.get("outputs", []))
    printed = {what: (int(a), int(b)) for what, a, b in re.findall(
        r"^(\S.*?)\s+(\d+) launches per step,\s+(\d+) with SGD's update as array code$", text,
        flags=re.M)}
    models = {"MLP 784-512-512-10": (lambda: dl.MLP([12, 16, 16, 10], seed=0), (8, 12)),
              "dl.CNN": (lambda: dl.CNN(image_size=(12, 12), seed=0), (4, 1, 12, 12)),
              "dl.fuse(dl.CNN())": (lambda: dl.fuse(dl.CNN(image_size=(12, 12), seed=0)),
                                    (4, 1, 12, 12))}
    assert set(printed) == set(models), printed
    rng = np.random.default_rng(0)
    for what, (make, shape) in models.items():
        x = emulator.device_array(rng.standard_normal(shape, dtype=np.float32))
        counted = emulator.step_launches(make, x, rng.integers(0, 10, shape[0]))
        names = [type(layer).__name__ for layer in make().layers]
        from dlcourse.check.gpu_performance import GPU_LAUNCHES, _step_launches
        assert [_step_launches(names, GPU_LAUNCHES, 2, u) for u in (1, 4)] == counted, what
        assert printed[what] == tuple(counted), what


# ---- new exercises (issue 26): Adam, per-axis output size, ties of a max, running statistics
def adam_good(params, grads, m, v, t, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    for k in params:
        g = grads[k]
        m[k] *= beta1
        m[k] += (1 - beta1) * g
        v[k] *= beta2
        v[k] += (1 - beta2) * g**2
        params[k] -= lr * (m[k] / (1 - beta1**t)) / (np.sqrt(v[k] / (1 - beta2**t)) + eps)


def adam_uncorrected(params, grads, m, v, t, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    adam_good(params, grads, m, v, 10**6, lr, beta1, beta2, eps)


def adam_stores_corrected(params, grads, m, v, t, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    adam_good(params, grads, m, v, t, lr, beta1, beta2, eps)
    for k in params:
        m[k] /= 1 - beta1**t
        v[k] /= 1 - beta2**t


def adam_eps_inside(params, grads, m, v, t, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    for k in params:
        g = grads[k]
        m[k] *= beta1
        m[k] += (1 - beta1) * g
        v[k] *= beta2
        v[k] += (1 - beta2) * g**2
        params[k] -= lr * (m[k] / (1 - beta1**t)) / np.sqrt(v[k] / (1 - beta2**t) + eps)


def adam_library(params, grads, m, v, t, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    class Model:
        pass
    model = Model()
    model.params, model.grads = params, grads
    dl.Adam(model, lr=lr, betas=(beta1, beta2), eps=eps).step()


def adam_uncorrected_eps_inside(params, grads, m, v, t, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    """Two mistakes at once: no bias correction, and eps under the root (issue 37: the missing
    correction, the one that matters early, is named)."""
    for k in params:
        m[k][...] = beta1 * m[k] + (1 - beta1) * grads[k]
        v[k][...] = beta2 * v[k] + (1 - beta2) * grads[k] * grads[k]
        params[k] -= lr * m[k] / np.sqrt(v[k] + eps)


def adam_out_updates(params, grads, m, v, t, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    """Right, written differently: the corrections as powers computed once, out= updates."""
    c1, c2 = 1 - beta1 ** t, 1 - beta2 ** t
    for k, g in grads.items():
        np.multiply(m[k], beta1, out=m[k])
        m[k] += (1 - beta1) * g
        np.multiply(v[k], beta2, out=v[k])
        v[k] += (1 - beta2) * np.square(g)
        params[k] -= lr * (m[k] / c1) / (np.sqrt(v[k] / c2) + eps)


def test_adam_step_without_bias_correction_is_named_whatever_else_is_wrong():
    expect_fail(C.adam_step, adam_uncorrected_eps_inside, "no bias correction",
                "the same whatever t is")
    C.adam_step(adam_out_updates)


def test_adam_step():
    C.adam_step(adam_good)
    expect_fail(C.adam_step, adam_uncorrected, "no bias correction")
    expect_fail(C.adam_step, adam_stores_corrected, "bias-CORRECTED")
    expect_fail(C.adam_step, adam_eps_inside, "outside the square root")
    expect_fail(C.adam_step, adam_library, "it calls dl.Adam,", "library's own version")


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def os2_good(H, W, kernel_size, stride=1, padding=0):
    (kh, kw), (sh, sw), (ph, pw) = _pair(kernel_size), _pair(stride), _pair(padding)
    return (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1


def os2_swapped(H, W, kernel_size, stride=1, padding=0):
    return os2_good(H, W, kernel_size, stride, padding)[::-1]


def os2_height_only(H, W, kernel_size, stride=1, padding=0):
    (kh, _), (sh, _), (ph, _) = _pair(kernel_size), _pair(stride), _pair(padding)
    return (H + 2 * ph - kh) // sh + 1, (W + 2 * ph - kh) // sh + 1


def test_conv_output_size_2d():
    C.conv_output_size_2d(os2_good)
    expect_fail(C.conv_output_size_2d, os2_swapped, "swapped")
    expect_fail(C.conv_output_size_2d, os2_height_only, "the width used the height's settings")
    expect_fail(C.conv_output_size_2d,
                lambda H, W, kernel_size, stride=1, padding=0: dl.conv.output_size(
                    H, W, *_pair(kernel_size), stride, padding), "library's own version")


def mwg_good(window):
    g = np.zeros_like(window)
    g[np.unravel_index(window.argmax(), window.shape)] = 1
    return g


def test_max_window_grad():
    C.max_window_grad(mwg_good)
    expect_fail(C.max_window_grad, lambda w: (w == w.max()).astype(float), "two 2s tie",
                "add up to 1")
    expect_fail(C.max_window_grad, lambda w: (w == w.max()) / (w == w.max()).sum(),
                "split the 1 evenly")
    expect_fail(C.max_window_grad, lambda w: np.eye(w.size)[w.argmax()], "shape")


def bnr_good(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5, training=True):
    C_ = x.shape[1]
    if training:
        mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
        M = x.size // C_
        running_mean *= 1 - momentum
        running_mean += momentum * mean
        running_var *= 1 - momentum
        running_var += momentum * var * M / (M - 1)
    else:
        mean, var = running_mean, running_var
    x_hat = (x - mean.reshape(1, C_, 1, 1)) / np.sqrt(var.reshape(1, C_, 1, 1) + eps)
    return gamma.reshape(1, C_, 1, 1) * x_hat + beta.reshape(1, C_, 1, 1)


def bnr_biased(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5, training=True):
    M = x.size // x.shape[1]
    out = bnr_good(x, gamma, beta, running_mean, running_var, momentum, eps, training)
    if training:   # undo the unbiasing
        running_var -= momentum * x.var(axis=(0, 2, 3)) * (M / (M - 1) - 1)
    return out


def bnr_eval_batch(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5,
                   training=True):
    if training:
        return bnr_good(x, gamma, beta, running_mean, running_var, momentum, eps, True)
    # evaluation with the batch's statistics (on copies, so the running ones stay)
    return bnr_good(x, gamma, beta, running_mean.copy(), running_var.copy(), momentum, eps, True)


def test_batchnorm_running():
    C.batchnorm_running(bnr_good)
    expect_fail(C.batchnorm_running, bnr_biased, "BIASED batch variance")
    expect_fail(C.batchnorm_running, bnr_eval_batch, "evaluation mode", "RUNNING statistics")
