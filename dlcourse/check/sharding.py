"""Checks for lesson 13b (overlap, ZeRO-1 sharding and activation recomputation).

============================  =============================================================
check                         your function
============================  =============================================================
:func:`bucket_plan`           ``(nbytes, bucket_bytes) -> [[layer, ...], ...]``, buckets in
                              the order backward fills them
:func:`reduce_scatter`        ``(comm, x) -> chunk r of the sum``, on a ring, sendrecv only
:func:`sharded_adam_step`     ``(p, g_shard, m, v, t, rank, world_size, lr) -> (p_shard, m,
                              v)``: Adam on this rank's shard (ZeRO-1)
:func:`recompute_memory`      ``(n, k, a) -> bytes``: activations held at the peak with k
                              recomputed segments
============================  =============================================================

The reduce-scatter runs on simulated ranks (``dl.distributed.simulate``: a thread per rank,
real messages through queues) with a communicator of this module's own that counts what is
sent and refuses the collectives the exercise builds (``comm.reduce_scatter``,
``comm.all_reduce``, ...). Everything else is called through ``harness.call``, with the library
closed (``seal.py``). The library's answers (``dlcourse/overlap.py``, ``collectives.py``,
``zero.py``, ``recompute.py``) are the references the lesson compares with afterwards.
"""
from __future__ import annotations

import numpy as np

from ..communicators import chunk_sizes
from ..optim import Adam
from .data_parallel import run_on_ranks      # lesson 13's simulated ranks, counted
from .harness import (ExerciseError, call, expect_close, expect_tuple, expect_unchanged, fail,
                      passed, to_array, to_number)

__all__ = ["bucket_plan", "reduce_scatter", "sharded_adam_step", "recompute_memory",
           "ExerciseError"]


# ======================================================================================
# bucket_plan
# ======================================================================================
def _plan(nbytes, bucket_bytes, order="backward", close=">=", inner="backward", skip_empty=True,
          keep_last=True, at_most=False):
    """The bucket plan under a rule; the defaults are the lesson's, the others its mistakes."""
    __tracebackhide__ = True
    layers = list(range(len(nbytes)))
    walk = layers[::-1] if order == "backward" else layers
    plan, current, size = [], [], 0
    for i in walk:
        if skip_empty and nbytes[i] == 0:
            continue
        if at_most and current and size + nbytes[i] > bucket_bytes:
            plan.append(current)
            current, size = [], 0
        current.append(i)
        size += nbytes[i]
        full = size > bucket_bytes if close == ">" else size >= bucket_bytes
        if full and not at_most:
            plan.append(current)
            current, size = [], 0
    if current and keep_last:
        plan.append(current)
    if inner != order:
        plan = [bucket[::-1] for bucket in plan]
    return plan


def _as_plan(value, fn, case):
    __tracebackhide__ = True
    shape = ("return a list of buckets, each a list of layer indices (whole numbers), e.g. "
             "[[4, 2], [0]].")
    if value is None:
        fail(fn, case, "it returned None.", "did your function `return` the plan?")
    try:
        plan = [[int(i) if float(i).is_integer() else None for i in bucket] for bucket in value]
    except (TypeError, ValueError):
        fail(fn, case, f"it returned {type(value).__name__} {value!r:.80}, not a list of "
                       f"buckets.", shape)
    if any(i is None for bucket in plan for i in bucket):
        fail(fn, case, f"it returned {value!r:.80}: a layer index is not a whole number.", shape)
    return plan


_BUCKET_CASES = [([400, 0, 40, 0, 80], 100), ([10, 10, 10, 10], 20), ([5, 5, 5], 0),
                 ([30, 0, 70, 0, 20, 0, 50], 60), ([100], 10 ** 9), ([0, 8, 0], 4),
                 ([12, 4, 4, 4, 30], 8)]

_BUCKET_MISTAKES = [
    (dict(order="forward", inner="forward"),
     "the buckets are filled in forward order, from layer 0 up. Backward finishes the LAST "
     "layer first: walk the layers from the end, so that the first bucket can be sent while "
     "backward is still computing the early layers."),
    (dict(inner="forward"),
     "the right layers are in each bucket, but each bucket lists them in forward order: list "
     "them in the order backward finishes them (the last layer first)."),
    (dict(close=">"),
     "a bucket that reached bucket_bytes exactly was kept open and overfilled with the next "
     "layer: it closes as soon as it holds AT LEAST bucket_bytes."),
    (dict(at_most=True),
     "the buckets never pass bucket_bytes: a layer that would overflow starts a new bucket "
     "(lesson 13's buckets(), a cap). Here a bucket closes only once it is full: the layer "
     "that fills it goes in, and the bucket closes after it."),
    (dict(skip_empty=False),
     "a layer without parameters (0 bytes) is in a bucket: it has no gradient to send; leave "
     "it out of every bucket."),
    (dict(keep_last=False),
     "the last bucket, the one not yet full when the layers run out, is missing: it must be "
     "sent too (the first layers' gradients are in it)."),
]


def bucket_plan(fn) -> None:
    """Check ``fn(nbytes, bucket_bytes)``: walking the layers from the last to the first,
    skipping those of 0 bytes, each joins the open bucket, which closes as soon as it holds at
    least ``bucket_bytes``; a last bucket that is not full is sent too. Returns the buckets,
    first sent first, each listing its layers in the order backward finishes them."""
    __tracebackhide__ = True
    for nbytes, bucket_bytes in _BUCKET_CASES:
        case = f"nbytes={nbytes}, bucket_bytes={bucket_bytes}"
        given = list(nbytes)
        got = _as_plan(call(fn, given, bucket_bytes, case=case), fn, case)
        expected = _plan(nbytes, bucket_bytes)
        if got == expected:
            if given != nbytes:
                fail(fn, case, "it changed its input nbytes in place.",
                     "read nbytes; do not pop from it or sort it: the caller still needs it.")
            continue
        for rule, explanation in _BUCKET_MISTAKES:
            if got == _plan(nbytes, bucket_bytes, **rule):
                fail(fn, case, f"it returned {got}.", explanation)
        placed = sorted(i for bucket in got for i in bucket)
        wanted = sorted(i for bucket in expected for i in bucket)
        fix = ("every layer with gradients must be in exactly one bucket (layers are never "
               "split), and no other index." if placed != wanted else
               "walk from the last layer down, add each layer's bytes to the open bucket, and "
               "close the bucket as soon as it holds at least bucket_bytes; which layers did "
               "you put together?")
        fail(fn, case, f"it returned {got}; that is not the plan the rule gives "
                       f"({len(expected)} bucket(s)).", fix)
    passed(fn, len(_BUCKET_CASES))


# ======================================================================================
# reduce_scatter, on simulated ranks
# ======================================================================================
def _split(total, N, rule):
    """Chunks of ``total`` under a cutting rule: the lesson's, or a mistaken one."""
    __tracebackhide__ = True
    if rule == "last":                              # every chunk total // N, the rest last
        bounds = [r * (total // N) for r in range(N)] + [total]
    else:                                           # every chunk ceil(total / N), fewer last
        step = -(-total // N)
        bounds = [min(r * step, total) for r in range(N)] + [total]
    return [slice(bounds[r], bounds[r + 1]) for r in range(N)]


def reduce_scatter(fn) -> None:
    """Check ``fn(comm, x)`` on 1 to 4 simulated ranks: rank r returns chunk r (the lengths
    of ``np.array_split``: the first P mod N chunks one longer) of the sum of every rank's x,
    leaves x unchanged, and sends N-1 messages of one chunk each, each rank to one neighbour
    and from the other (a ring, either way round), through ``sendrecv`` only."""
    __tracebackhide__ = True
    cases = [(2, 8, np.float64), (3, 10, np.float64), (4, 6, np.float32), (1, 4, np.float64),
             (3, 2, np.float64), (4, 13, np.float64)]
    for N, P, dtype in cases:
        case = f"{N} ranks, x of shape ({P},) ({np.dtype(dtype).name}) on each"
        inputs = [np.random.default_rng([r, 41]).standard_normal(P).astype(dtype)
                  for r in range(N)]
        given = [x.copy() for x in inputs]
        out, counters = run_on_ranks(fn, given, case)
        total = sum(inputs)
        sizes = chunk_sizes(P, N)
        bounds = np.cumsum([0] + sizes)
        for r in range(N):
            got = to_array(out[r], fn, case, f"the result on rank {r}")
            mine = total[bounds[r]:bounds[r + 1]]
            if N > 1 and got.shape == total.shape and np.allclose(got, total, rtol=1e-5):
                fail(fn, case, f"rank {r} returned the whole sum, shape {got.shape}.",
                     "that is an all-reduce: a reduce-scatter leaves each rank only ITS chunk "
                     "of the sum (half the work, half the messages).")
            if got.shape != mine.shape:
                wrong = [f"chunk {c}" for c in range(N)
                         if bounds[c + 1] - bounds[c] == got.size and c != r]
                fail(fn, case, f"rank {r} returned shape {got.shape}; it owns chunk {r} of "
                               f"{P} elements cut in {N}, {sizes[r]} long.",
                     "cut the buffer as np.array_split does (the first P mod N chunks one "
                     "longer) and return chunk number rank" +
                     (f" (that length is {' or '.join(wrong)}'s)." if wrong else "."))
            mistakes = [(total[bounds[(r + 1) % N]:bounds[(r + 1) % N + 1]],
                         f"rank {r} holds chunk {(r + 1) % N} of the sum: where lesson 13's ring "
                         f"ends its reduce-scatter. Here rank r owns chunk r (as MPI's "
                         f"Reduce_scatter and ZeRO's shards): which chunk must each rank send "
                         f"first so that the sum of chunk r ends on rank r?"),
                        (inputs[r][bounds[r]:bounds[r + 1]],
                         "that is this rank's own part, unchanged: ADD what arrives from the left "
                         "neighbour into the chunk before passing it on.")]
            for rule in ("last", "ceil"):
                part = total[_split(P, N, rule)[r]]
                if part.shape == got.shape:
                    mistakes.append((part, "the chunk boundaries are off for a size that does "
                                           "not divide by N: the first P mod N chunks are one "
                                           "longer (np.array_split's rule), so chunk r starts "
                                           "after r chunks of different lengths."))
            expect_close(got, mine, fn, case, f"chunk {r} of the sum, on rank {r}", rtol=1e-5,
                         atol=1e-6, mistakes=mistakes,
                         fix="in each step ADD what arrives into the chunk it belongs to; check "
                             "the chunk numbers on paper for 3 ranks: after N-1 steps rank r "
                             "must hold the full sum of chunk r.")
            expect_unchanged(fn, f"{case}; rank {r}", [("x", inputs[r], given[r])],
                             "x is the caller's gradient buffer: add into copies of its chunks "
                             "(np.array_split gives views of x).")
            c = counters[r]
            if c.messages != N - 1:
                fail(fn, case, f"rank {r} called sendrecv {c.messages} times; a ring "
                               f"reduce-scatter on {N} ranks needs N-1 = {N - 1}.",
                     "one step per other rank: each chunk travels round the ring once, "
                     "gathering one term per step.")
            ring = {((r + 1) % N, (r - 1) % N)}
            if c.peers - ring and c.peers - {((r - 1) % N, (r + 1) % N)}:
                dest, source = sorted(c.peers - ring)[0]
                fail(fn, case, f"rank {r} sent to rank {dest} and received from rank {source}: "
                               f"that is not a ring.",
                     "send to (rank + 1) % N and receive from (rank - 1) % N at every step.")
            if N > 1 and c.sent > (N - 1) / N * P + N:
                fail(fn, case, f"rank {r} sent {c.sent} numbers; a ring reduce-scatter sends "
                               f"about (N-1)/N x {P} = {(N - 1) / N * P:.0f}.",
                     "send one chunk per step, not the whole buffer.")
    passed(fn, len(cases))


# ======================================================================================
# sharded_adam_step
# ======================================================================================
def _adam(p, g, m, v, t, lr, b1, b2, eps, *, bias_t=None, eps_inside=False):
    """One textbook Adam step (a mistake's, with the keywords)."""
    __tracebackhide__ = True
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    tb = t if bias_t is None else bias_t
    if tb is False:
        m_hat, v_hat = m, v
    else:
        m_hat, v_hat = m / (1 - b1 ** tb), v / (1 - b2 ** tb)
    denom = np.sqrt(v_hat + eps) if eps_inside else np.sqrt(v_hat) + eps
    return p - lr * m_hat / denom


_SLICE = ("if a slice of p came out shorter than g_shard, the shard starts at the wrong place: "
          "with P not divisible by N the first P mod N shards are one longer, so count the "
          "lengths of the shards of the ranks before this one.")


class _Flat:
    """A one-array model for dl.Adam: the reference."""

    def __init__(self, p):
        __tracebackhide__ = True
        self.params, self.grads = {"p": p}, {"p": np.zeros_like(p)}


def sharded_adam_step(fn) -> None:
    """Check ``fn(p, g_shard, m, v, t, rank, world_size, lr)`` over 4 steps on 1 to 4 ranks
    (P not divisible by N: ragged shards; float64): each rank returns ``(p_shard, m, v)``, its
    shard of the parameters after Adam's step (betas 0.9, 0.999, eps 1e-8) and its shard's new
    moments; the shards put end to end equal ``dl.Adam`` on all of p to 1e-12."""
    __tracebackhide__ = True
    cases = [(2, 9), (3, 10), (4, 7), (1, 5), (3, 2)]
    lr, b1, b2, eps = 1e-2, 0.9, 0.999, 1e-8
    for N, P in cases:
        gen = np.random.default_rng([N, P, 13])
        p_ref = gen.standard_normal(P)
        model = _Flat(p_ref.copy())
        adam = Adam(model, lr=lr)
        sizes = chunk_sizes(P, N)
        bounds = np.cumsum([0] + sizes)
        state = [(np.zeros(n), np.zeros(n)) for n in sizes]          # the learner's, per rank
        p = p_ref.copy()
        for t in range(1, 5):
            case = (f"{N} rank(s), P = {P} parameters (shards of {sizes}), step t = {t}, "
                    f"lr = {lr}")
            g = gen.standard_normal(P) * (10.0 if t == 2 else 1.0)
            before = p.copy()
            model.grads["p"][...] = g
            adam.step()
            shards = []
            for r in range(N):
                lo, hi = bounds[r], bounds[r + 1]
                m, v = state[r]
                p_given = p.copy()
                got = expect_tuple(call(fn, p_given, g[lo:hi].copy(), m.copy(), v.copy(), t, r, N,
                                        lr, case=f"{case}; rank {r}", on_error=_SLICE),
                                   3, fn, case, "p_shard, m, v")
                p_shard, m_new, v_new = (to_array(x, fn, case, f"{name} on rank {r}")
                                         for x, name in zip(got, ("p_shard", "m", "v")))
                where = f"{case}; rank {r}"
                if p_shard.shape == (P,) and N > 1:
                    fail(fn, where, f"rank {r} returned {P} parameters: all of p.",
                         "a rank updates only its shard: the elements of p that its g_shard, m "
                         "and v belong to.")
                if p_shard.shape != (hi - lo,):
                    fail(fn, where, f"p_shard on rank {r} has shape {p_shard.shape}; the rank "
                                    f"owns {hi - lo} elements.",
                         "return the updated shard alone, as long as g_shard.")
                m_ref = b1 * m + (1 - b1) * g[lo:hi]
                v_ref = b2 * v + (1 - b2) * g[lo:hi] ** 2
                expect_close(m_new, m_ref, fn, where, f"m on rank {r}", rtol=1e-12, atol=1e-14,
                             fix="m is the running mean of the gradient: beta1 of the old m and "
                                 "(1 - beta1) of g_shard.")
                expect_close(v_new, v_ref, fn, where, f"v on rank {r}", rtol=1e-12, atol=1e-14,
                             mistakes=[(b2 * v + (1 - b2) * np.abs(g[lo:hi]),
                                        "v is the running mean of the SQUARED gradient.")],
                             fix="v is the running mean of the squared gradient: beta2 of the old "
                                 "v and (1 - beta2) of g_shard squared.")
                if t == 1 and not np.isfinite(p_shard).all():
                    fail(fn, where, f"p_shard on rank {r} holds nan or inf after the first step.",
                         "the bias correction divides by zero: with the step before (t - 1 = 0), "
                         "1 - beta^0 is 0. t is the number of this step, 1 for the first.")
                args = (g[lo:hi], m, v, t, lr, b1, b2, eps)
                mine = before[lo:hi]
                wrong = [(lambda: _adam(mine, *args, bias_t=t - 1),
                          "the bias correction uses the step before: t is the number of this "
                          "step (1 for the first), and the corrections divide by 1 - beta^t."),
                         (lambda: _adam(mine, *args, bias_t=t + 1),
                          "the bias correction uses the next step's number: t is already this "
                          "step's (1 for the first)."),
                         (lambda: _adam(mine, *args, bias_t=False),
                          "the moments are not bias-corrected: m and v start at zero, so early "
                          "on they are too small; divide each by 1 - beta^t."),
                         (lambda: _adam(mine, *args, eps_inside=True),
                          "eps is inside the square root: Adam adds it to sqrt(v_hat).")]
                for lo_wrong in {r * (P // N), r * -(-P // N), r * (hi - lo)} - {lo}:
                    if 0 <= lo_wrong and lo_wrong + hi - lo <= P:
                        wrong.append((lambda lw=lo_wrong: _adam(before[lw:lw + hi - lo], *args),
                                      f"rank {r}'s shard starts at {lo_wrong}, not at the end of "
                                      f"the shards before it: with P not divisible by N the "
                                      f"first P mod N shards are one longer, so count the "
                                      f"lengths of ranks 0..{r - 1}."))
                expect_close(p_shard, adam.model.params["p"][lo:hi], fn, where,
                             f"p_shard on rank {r} after the step", rtol=1e-12, atol=1e-12,
                             mistakes=wrong,
                             fix="Adam's update of each element of this rank's shard of p: "
                                 "lesson 04b's step, bias correction and all, on the shard.")
                expect_unchanged(fn, where, [("p", before, p_given)],
                                 "p is every rank's copy of the parameters: the all-gather "
                                 "after the step replaces it; return the new shard instead.")
                state[r] = (m_new.copy(), v_new.copy())
                shards.append(p_shard)
            p = np.concatenate(shards)                    # the all-gather
    passed(fn, len(cases))


# ======================================================================================
# recompute_memory
# ======================================================================================
def recompute_memory(fn) -> None:
    """Check ``fn(n, k, a)``: the bytes of activations held at the peak of a training step of
    n layers, each saving ``a`` bytes, run in k recomputed segments (cut as np.array_split
    cuts: the first n mod k segments one layer longer): the k kept inputs and the saved arrays
    of the longest segment, recomputed in its backward."""
    __tracebackhide__ = True
    cases = [(10, 3, 2), (16, 4, 1), (7, 1, 5), (9, 9, 3), (100, 7, 1000), (12, 5, 64)]
    for n, k, a in cases:
        case = f"n={n} layers, k={k} segments, a={a} bytes per layer"
        got = to_number(call(fn, n, k, a, case=case), fn, case, "the bytes",
                        "return one number of bytes.")
        longest = -(-n // k)
        mistakes = [((k + n / k) * a, "n/k layers is not a whole number when k does not divide "
                                      "n: the segments are whole layers, and the peak is in the "
                                      "LONGEST one's backward."),
                    ((k + n // k) * a, "the longest segment is one layer longer than n // k "
                                       "when k does not divide n (the first n mod k segments "
                                       "get one more)."),
                    (longest * a, "the segments' kept inputs are missing: forward keeps one "
                                  "input per segment, and they stay until backward ends."),
                    (k * a, "the recomputed segment is missing: in its backward, a segment's "
                            "layers hold their saved arrays again."),
                    (n * a, "that is without recomputation: every layer's saved arrays kept.")]
        expect_close(np.asarray(got, float), float((k + longest) * a), fn, case,
                     "the activation bytes at the peak", rtol=1e-9, atol=0,
                     mistakes=[(m, why) for m, why in mistakes if m != (k + longest) * a],
                     fix="add what is held during the backward of the longest segment: what "
                         "forward kept, and what the recomputed segment saves.")
    passed(fn, len(cases))


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]. Words, questions, pseudo-code with blanks.
HINTS: dict[str, list[str]] = {
    'bucket_plan': [
        ('loop over the layer indices from the last to the first; skip a layer of 0 bytes; '
         'append it to the open bucket and add its bytes to a running total; when that total '
         'reaches bucket_bytes, the bucket is done: keep it and start an empty one'),
        ('pseudo-code: plan = [], bucket = [], size = 0; for each layer index from ___ down to '
         '___: if the layer has 0 bytes, next; bucket gets the index; size grows by ___; if '
         'size ___ bucket_bytes: plan gets '
         'bucket, and bucket, size start again. After the loop: what about a bucket that is not '
         'empty? Section 1 states the rule'),
    ],
    'reduce_scatter': [
        ('in lesson 13 rank r ended the reduce-scatter holding chunk r + 1. Shift every chunk '
         'number by one so that it ends holding chunk r: at step s, which chunk does rank r send, '
         'and which chunk is the one arriving from the left?'),
        ('pseudo-code: N-1 times: the chunk to send has number ___ (it depends on r and s, '
         'modulo N), the one to receive is the number below it; incoming = an empty array shaped '
         'like the chunk to receive; sendrecv(the chunk to send, right, incoming, left); add '
         '___ into the chunk received. Draw it for 3 ranks to check'),
    ],
    'sharded_adam_step': [
        ('two parts: where does this rank\'s shard start in p (the lengths of the shards of the '
         'ranks before it, np.array_split\'s rule), and Adam\'s step (lesson 04b) on that slice '
         'with g_shard, m and v: the moments, their bias correction with this step\'s t, then '
         'the update'),
        ('pseudo-code: lo = the sum of the shard lengths of ranks 0..rank-1; mine = p[lo : lo + '
         'len(g_shard)]; m = ___ m + ___ g_shard; v = ___ v + ___ g_shard²; m_hat = m / (1 - '
         '___); v_hat likewise; new = mine - lr · m_hat / (___ + eps). Return the new shard, m, v'),
    ],
    'recompute_memory': [
        ('add two things held at the same moment, in the backward of the longest segment: every '
         'segment\'s kept input (how many segments?) and the saved arrays of the layers of the '
         'segment being recomputed (how many layers does the longest segment have, when k does '
         'not divide n?)'),
        ('pseudo-code: longest = n divided by k, rounded ___; return (___ + longest) · a. Try it '
         'on n = 16, k = 4: 4 inputs and a segment of 4 layers'),
    ],
}

# What would give each answer away: no first-level hint may contain one of these.
ANSWER_TOKENS: dict[str, list[str]] = {
    'bucket_plan': ['>= bucket_bytes', 'range(len(nbytes) - 1, -1, -1)', 'reversed(range',
                    '[::-1]', 'at least bucket_bytes', 'size >='],
    'reduce_scatter': ['(r - s - 1)', 'r - s - 1', 'r - s - 2', '(r - s - 2)', 'chunks[r]',
                       'r minus s minus one'],
    'sharded_adam_step': ['sum(sizes[:rank])', 'r * (P // N) + min', 'min(rank, P % N)',
                          'beta1 ** t', 'b1 ** t', 'np.sqrt(v_hat) + eps', '1 - beta2 ** t'],
    'recompute_memory': ['k + ceil', 'ceil(n / k)', '-(-n // k)', '(k + ', 'k * a +',
                         'math.ceil'],
}
