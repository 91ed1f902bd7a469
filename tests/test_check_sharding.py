"""Lesson 13b's checks (dlcourse/check/sharding.py, issue 41): right answers pass, answers
written differently pass, and each known mistake is named."""
from __future__ import annotations

import math

import numpy as np
import pytest

import dlcourse as dl
from dlcourse.check import ExerciseError


# -- right answers -------------------------------------------------------------------------
def bucket_plan(nbytes, bucket_bytes):
    plan, bucket, size = [], [], 0
    for i in range(len(nbytes) - 1, -1, -1):
        if nbytes[i] == 0:
            continue
        bucket.append(i)
        size += nbytes[i]
        if size >= bucket_bytes:
            plan.append(bucket)
            bucket, size = [], 0
    if bucket:
        plan.append(bucket)
    return plan


def bucket_plan_other(nbytes, bucket_bytes):      # tuples, NumPy, a while loop
    order = np.flatnonzero(np.asarray(nbytes))[::-1]
    plan, start = [], 0
    while start < len(order):
        sizes = np.cumsum(np.asarray(nbytes)[order[start:]])
        stop = start + int(np.argmax(sizes >= bucket_bytes)) + 1 if (sizes >= bucket_bytes).any() \
            else len(order)
        plan.append(tuple(order[start:stop]))
        start = stop
    return tuple(plan)


def _reduce_scatter(direction=+1):
    def reduce_scatter(comm, x):
        N, r = comm.world_size, comm.rank
        chunks = [c.copy() for c in np.array_split(x, N)]
        right, left = (r + direction) % N, (r - direction) % N
        for s in range(N - 1):
            send, recv = (r - direction * (s + 1)) % N, (r - direction * (s + 2)) % N
            incoming = np.empty_like(chunks[recv])
            comm.sendrecv(chunks[send], right, incoming, left)
            chunks[recv] += incoming
        return chunks[r]
    return reduce_scatter


def sharded_adam_step(p, g_shard, m, v, t, rank, world_size, lr, beta1=0.9, beta2=0.999,
                      eps=1e-8):
    P, N = p.size, world_size
    lo = rank * (P // N) + min(rank, P % N)
    mine = p[lo:lo + g_shard.size]
    m = beta1 * m + (1 - beta1) * g_shard
    v = beta2 * v + (1 - beta2) * g_shard * g_shard
    m_hat, v_hat = m / (1 - beta1 ** t), v / (1 - beta2 ** t)
    return mine - lr * m_hat / (np.sqrt(v_hat) + eps), m, v


def sharded_adam_step_other(p, g_shard, m, v, t, rank, world_size, lr):
    """In place on m and v, the boundary from np.array_split, the folded step size."""
    lo = sum(len(c) for c in np.array_split(np.empty(p.size), world_size)[:rank])
    m *= 0.9
    m += 0.1 * g_shard
    v *= 0.999
    v += 0.001 * g_shard ** 2
    step = lr * math.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
    return p[lo:lo + len(g_shard)] - step * m / (np.sqrt(v) + 1e-8 * math.sqrt(1 - 0.999 ** t)), m, v


def recompute_memory(n, k, a):
    return (k + -(-n // k)) * a


RIGHT = [("bucket_plan", bucket_plan), ("bucket_plan", bucket_plan_other),
         ("reduce_scatter", _reduce_scatter(+1)), ("reduce_scatter", _reduce_scatter(-1)),
         ("sharded_adam_step", sharded_adam_step), ("sharded_adam_step", sharded_adam_step_other),
         ("recompute_memory", recompute_memory),
         ("recompute_memory", lambda n, k, a: float(a * (k + math.ceil(n / k))))]


@pytest.mark.parametrize("check, right", RIGHT, ids=[f"{c}-{i}" for i, (c, _) in enumerate(RIGHT)])
def test_right_answers_pass_however_written(check, right, capsys):
    getattr(dl.check, check)(right)
    assert "\u2713" in capsys.readouterr().out


# -- mistakes ------------------------------------------------------------------------------
def _bucket_plan(order="backward", close=">=", inner="backward", skip_empty=True,
                 keep_last=True, at_most=False):
    def bucket_plan(nbytes, bucket_bytes):
        layers = list(range(len(nbytes)))
        plan, bucket, size = [], [], 0
        for i in (layers[::-1] if order == "backward" else layers):
            if skip_empty and nbytes[i] == 0:
                continue
            if at_most and bucket and size + nbytes[i] > bucket_bytes:
                plan.append(bucket)
                bucket, size = [], 0
            bucket.append(i)
            size += nbytes[i]
            if not at_most and (size > bucket_bytes if close == ">" else size >= bucket_bytes):
                plan.append(bucket)
                bucket, size = [], 0
        if bucket and keep_last:
            plan.append(bucket)
        return [b[::-1] for b in plan] if inner != order else plan
    return bucket_plan


def _rs_chunk_plus_one(comm, x):           # lesson 13's reduce-scatter: ends with chunk r + 1
    N, r = comm.world_size, comm.rank
    chunks = [c.copy() for c in np.array_split(x, N)]
    for s in range(N - 1):
        i = (r - s - 1) % N
        incoming = np.empty_like(chunks[i])
        comm.sendrecv(chunks[(r - s) % N], (r + 1) % N, incoming, (r - 1) % N)
        chunks[i] += incoming
    return chunks[(r + 1) % N]


def _rs_views(comm, x):                    # adds into views of x
    N, r = comm.world_size, comm.rank
    chunks = np.array_split(x, N)
    for s in range(N - 1):
        send, recv = (r - s - 1) % N, (r - s - 2) % N
        incoming = np.empty_like(chunks[recv])
        comm.sendrecv(chunks[send], (r + 1) % N, incoming, (r - 1) % N)
        chunks[recv] += incoming
    return chunks[r].copy()


def _rs_refused(comm, x):
    return comm.reduce_scatter(x)


def _adam_with(bias="t", lo_rule="split", eps_inside=False):
    def sharded_adam_step(p, g_shard, m, v, t, rank, world_size, lr):
        P, N, n = p.size, world_size, g_shard.size
        lo = {"split": rank * (P // N) + min(rank, P % N), "own": rank * n,
              "ceil": rank * -(-P // N)}[lo_rule]
        m = 0.9 * m + 0.1 * g_shard
        v = 0.999 * v + 0.001 * g_shard ** 2
        tb = {"t": t, "t-1": t - 1, "t+1": t + 1}.get(bias)
        m_hat, v_hat = (m, v) if bias == "none" else (m / (1 - 0.9 ** tb), v / (1 - 0.999 ** tb))
        denom = np.sqrt(v_hat + 1e-8) if eps_inside else np.sqrt(v_hat) + 1e-8
        return p[lo:lo + n] - lr * m_hat / denom, m, v
    return sharded_adam_step


def _adam_whole(p, g_shard, m, v, t, rank, world_size, lr):
    return p.copy(), 0.9 * m + 0.1 * g_shard, 0.999 * v + 0.001 * g_shard ** 2


MISTAKES = [
    ("bucket_plan", _bucket_plan(order="forward", inner="forward"), ["forward order"]),
    ("bucket_plan", _bucket_plan(inner="forward"), ["lists them in forward order"]),
    ("bucket_plan", _bucket_plan(close=">"), ["overfilled", "AT LEAST"]),
    ("bucket_plan", _bucket_plan(at_most=True), ["never pass bucket_bytes", "a cap"]),
    ("bucket_plan", _bucket_plan(skip_empty=False), ["without parameters"]),
    ("bucket_plan", _bucket_plan(keep_last=False), ["last bucket"]),
    ("reduce_scatter", _rs_chunk_plus_one, ["where lesson 13's ring ends", "rank r owns chunk r"]),
    ("reduce_scatter", lambda comm, x: dl.distributed.ring_all_reduce(comm, x),
     ["library's own version"]),
    ("reduce_scatter", _rs_views, ["changed its input x in place", "views of x"]),
    ("reduce_scatter", _rs_refused, ["comm.reduce_scatter is what you are building"]),
    ("sharded_adam_step", _adam_with(bias="t-1"), ["the step before", "divides by zero"]),
    ("sharded_adam_step", _adam_with(bias="t+1"), ["next step's number"]),
    ("sharded_adam_step", _adam_with(bias="none"), ["not bias-corrected"]),
    ("sharded_adam_step", _adam_with(eps_inside=True), ["eps is inside the square root"]),
    ("sharded_adam_step", _adam_with(lo_rule="own"), ["shard starts at", "one longer"]),
    ("sharded_adam_step", _adam_with(lo_rule="ceil"), ["shard starts at the wrong place",
                                                      "one longer"]),
    ("sharded_adam_step", _adam_whole, ["all of p"]),
    ("recompute_memory", lambda n, k, a: (k + n / k) * a, ["not a whole number"]),
    ("recompute_memory", lambda n, k, a: (k + n // k) * a, ["one layer longer"]),
    ("recompute_memory", lambda n, k, a: -(-n // k) * a, ["kept inputs are missing"]),
    ("recompute_memory", lambda n, k, a: k * a, ["recomputed segment is missing"]),
    ("recompute_memory", lambda n, k, a: n * a, ["without recomputation"]),
]


@pytest.mark.parametrize("check, wrong, expected", MISTAKES,
                         ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(MISTAKES)])
def test_each_known_mistake_is_named(check, wrong, expected):
    with np.errstate(all="ignore"), pytest.raises(ExerciseError) as info:
        getattr(dl.check, check)(wrong)
    message = str(info.value)
    for part in expected:
        assert part in message, f"{part!r} not in:\n{message}"
    assert "case:" in message


def test_the_reduce_scatter_check_counts_the_ring(capsys):
    """All-to-all with the right sums is not a ring; the whole sum is an all-reduce."""
    def direct(comm, x):
        N, r = comm.world_size, comm.rank
        chunks = [c.copy() for c in np.array_split(x, N)]
        for s in range(1, N):
            incoming = np.empty_like(chunks[r])
            comm.sendrecv(chunks[(r + s) % N], (r + s) % N, incoming, (r - s) % N)
            chunks[r] += incoming
        return chunks[r]
    with pytest.raises(ExerciseError, match="not a ring"):
        dl.check.reduce_scatter(direct)

    def whole(comm, x):
        out = x.copy()
        for s in range(comm.world_size - 1):
            incoming = np.empty_like(x)
            comm.sendrecv(x, (comm.rank + 1) % comm.world_size, incoming,
                          (comm.rank - 1) % comm.world_size)
            out += incoming
        return out if comm.world_size > 1 else out
    with pytest.raises(ExerciseError, match="whole sum"):
        dl.check.reduce_scatter(whole)
