"""Checks for lesson 13 (data-parallel training).

==========================  ===============================================================
check                       your function
==========================  ===============================================================
:func:`ring_all_reduce`     ``(comm, x) -> the sum of x over all ranks``, by sendrecv only
:func:`fit_alpha_beta`      ``(nbytes, seconds) -> (alpha, beta)``, least squares
==========================  ===============================================================

The ring is run on simulated ranks (``dl.distributed.simulate``: one thread per rank, real
messages through queues), so the check needs no MPI; the lesson then runs the same function
under ``mpiexec`` against MPI's Allreduce. The shared machinery (``call``, ``fail``,
``expect_close``, ...) lives in ``harness.py``. While the ring runs, ``comm.all_reduce`` and
the library's own ring (``dl.distributed.ring_all_reduce``) answer with an error.
"""
from __future__ import annotations

import numpy as np

from .. import distributed
from .harness import (ExerciseError, call, expect_close, expect_tuple, expect_unchanged,
                      check_wrapper, closed, fail, handed, passed, raise_error, to_array)

__all__ = ["ring_all_reduce", "fit_alpha_beta", "ExerciseError"]   # and run_on_ranks, 13b's

# The learner's ring runs on simulated ranks with the library closed (harness.closed): what it
# may call is the counting communicator it is handed, whose all_reduce refuses too.
def _refused_collective(name):
    """A communicator method that refuses: the learner builds the collective from sendrecv."""
    __tracebackhide__ = True

    def collective(self, *args, **kwargs):
        __tracebackhide__ = True
        raise RuntimeError(f"comm.{name} is what you are building, or does it for you: use "
                           f"sendrecv only.")
    collective.__name__ = name
    return collective


@handed
class _Counting(distributed.Communicator):
    """A simulated rank that counts what it sends and refuses every collective (the learner
    builds one from sendrecv): lessons 13 and 13b."""

    def __init__(self, inner):
        __tracebackhide__ = True
        self.inner, self.rank, self.world_size = inner, inner.rank, inner.world_size
        self.messages, self.sent, self.peers = 0, 0, set()

    def sendrecv(self, send, dest, recv, source):
        __tracebackhide__ = True
        if not (0 <= dest < self.world_size and 0 <= source < self.world_size):
            raise ValueError(f"rank {self.rank} sent to {dest} / received from {source}: ranks "
                             f"are 0..{self.world_size - 1} (use % world_size).")
        self.messages += 1
        self.sent += np.asarray(send).size
        self.peers.add((dest, source))
        self.inner.sendrecv(send, dest, recv, source)

    all_reduce, all_reduce_in_place, iall_reduce_in_place, reduce_scatter, all_gather, \
        broadcast = (_refused_collective(name) for name in (
            "all_reduce", "all_reduce_in_place", "iall_reduce_in_place", "reduce_scatter",
            "all_gather", "broadcast"))


def run_on_ranks(fn, inputs, case):
    """Run ``fn(comm, x)`` on simulated ranks, one per input, with the library closed: (the
    result of each rank, each rank's counter). Lessons 13 and 13b's ring exercises."""
    __tracebackhide__ = True
    counters = {}

    def body(comm, x):
        __tracebackhide__ = True
        counting = counters[comm.rank] = _Counting(comm)
        return fn(counting, x)
    try:
        with closed(fn, case):
            out = distributed.simulate(body, inputs, timeout=5)
    except RuntimeError as err:
        cause = err.__cause__
        if isinstance(cause, ExerciseError):           # a refused shortcut, on some rank
            raise_error(cause)
        if isinstance(cause, NotImplementedError):
            @check_wrapper()
            def not_yet():                  # the usual "not implemented yet: <hint>" message
                __tracebackhide__ = True
                raise cause
            not_yet.__name__ = getattr(fn, "__name__", "your function")
            call(not_yet, case=case)
        stuck = "Empty" in repr(cause) or "did not finish" in str(err)
        fail(fn, case, f"it raised on the simulated ranks: {err}",
             "a rank waited for a message nobody sent: every rank must call sendrecv the same "
             "number of times, sending right (rank+1) and receiving from the left (rank-1)."
             if stuck else "read the error above: the traceback points at your code.")
    return out, counters


def ring_all_reduce(fn) -> None:
    """Check ``fn(comm, x)`` on 1 to 4 simulated ranks: every rank returns the sum of all
    ranks' x (same shape), leaves x unchanged, and sends 2(N-1) messages holding 2(N-1)/N of
    the buffer in all, through the communicator's ``sendrecv`` only, each rank to one neighbour
    and from the other (a ring, either way round)."""
    __tracebackhide__ = True
    n_cases = 0
    for N, shape, dtype in [(2, (8,), np.float64), (3, (10,), np.float64), (4, (5, 3), np.float32),
                            (1, (4,), np.float64), (3, (2,), np.float64)]:
        case = f"{N} ranks, x of shape {shape} ({np.dtype(dtype).name}) on each"
        inputs = [np.random.default_rng([r, 13]).standard_normal(shape).astype(dtype)
                  for r in range(N)]
        given = [x.copy() for x in inputs]
        out, counters = run_on_ranks(fn, given, case)
        total = sum(inputs)
        for r in range(N):
            got = to_array(out[r], fn, case, f"the result on rank {r}")
            if got.shape != shape:
                fail(fn, case, f"rank {r} returned shape {got.shape}, expected {shape}.",
                     "reshape the flat buffer back to x.shape before returning it.")
            chunks = np.array_split(np.arange(int(np.prod(shape))), N)
            partly = [k for k, idx in enumerate(chunks)
                      if np.allclose(got.reshape(-1)[idx], total.reshape(-1)[idx], rtol=1e-5)]
            fix = None
            if len(partly) == 1 and N > 1:
                fix = (f"only chunk {partly[0]} of {N} holds the full sum on rank {r}: after "
                       f"the reduce-scatter each rank owns one finished chunk; the all-gather "
                       f"(N-1 more steps, copying, not adding) passes them around.")
            expect_close(got, total, fn, case, f"the sum on rank {r}", rtol=1e-5, atol=1e-6,
                         fix=fix or "in the reduce-scatter ADD what arrives into your chunk; in "
                                    "the all-gather OVERWRITE it. Check the chunk indices on "
                                    "paper for 3 ranks: at each step, which chunk does rank r "
                                    "send, and which one does the chunk from its left neighbour "
                                    "belong to?")
            expect_unchanged(fn, f"{case}; rank {r}", [("x", inputs[r], given[r])],
                             "x is the caller's own buffer (its gradient), still needed after the "
                             "all-reduce: work on a copy of it. A reshape or a slice of x is a "
                             "view of x, so adding into a chunk of it writes into x.")
            c = counters[r]
            if c.messages != 2 * (N - 1):
                fail(fn, case, f"rank {r} called sendrecv {c.messages} times; a ring all-reduce "
                               f"on {N} ranks needs 2(N-1) = {2 * (N - 1)}.",
                     "N-1 steps of reduce-scatter, then N-1 steps of all-gather.")
            ring = {((r + 1) % N, (r - 1) % N)}
            if c.peers - ring and c.peers - {((r - 1) % N, (r + 1) % N)}:
                dest, source = sorted(c.peers - ring)[0]
                fail(fn, case, f"rank {r} sent to rank {dest} and received from rank {source}: "
                               f"that is not a ring. In a ring each rank sends only to its right "
                               f"neighbour r+1 and receives only from its left neighbour r-1 "
                               f"(mod N), so that every link carries one chunk per step.",
                     "send to (rank + 1) % N and receive from (rank - 1) % N at every step; the "
                     "chunks move around the ring, one neighbour at a time.")
            if N > 1 and c.sent > 2 * (N - 1) / N * total.size + 2 * N:
                fail(fn, case, f"rank {r} sent {c.sent} numbers; a ring sends about "
                               f"2(N-1)/N x {total.size} = {2 * (N - 1) / N * total.size:.0f}.",
                     "send one chunk (1/N of the buffer) per step, not the whole buffer.")
        n_cases += 1
    passed(fn, n_cases)


def fit_alpha_beta(fn) -> None:
    """Check ``fn(nbytes, seconds)``: the least-squares fit of seconds = alpha + nbytes / beta
    on the relative error (each residual divided by its own time), returning ``(alpha, beta)``:
    alpha in seconds, beta in bytes per second."""
    __tracebackhide__ = True
    n_cases = 0
    for alpha, beta, noise in [(2e-5, 5e9, 0.0), (1e-6, 2e10, 0.05), (5e-4, 1e8, 0.1)]:
        nbytes = np.array([8, 1e3, 1e4, 1e5, 1e6, 4e6])
        gen = np.random.default_rng(7)
        seconds = (alpha + nbytes / beta) * (1 + noise * gen.standard_normal(nbytes.size))
        case = f"alpha={alpha:g} s, beta={beta:g} B/s, {noise:.0%} noise"
        got = expect_tuple(call(fn, nbytes.copy(), seconds.copy(), case=case),
                           2, fn, case, "alpha, beta")
        a, b = (to_array(v, fn, case, name) for v, name in zip(got, ("alpha", "beta")))
        slope, intercept = np.polyfit(nbytes, seconds, 1, w=1 / seconds)
        plain_slope, plain_intercept = np.polyfit(nbytes, seconds, 1)
        sq_slope, sq_intercept = np.polyfit(nbytes, seconds, 1, w=seconds ** -2.0)
        squared = ("the weights are squared twice: the polynomial fit multiplies each residual by "
                   "its weight and THEN squares it, so the weight is what the residual is "
                   "divided by, once.")
        unweighted = ("that is the ordinary least-squares line, in which the megabyte messages "
                      "decide everything: the exercise fits the RELATIVE error, each residual "
                      "divided by its own time. Which weights give the line fit that?")
        # the two wrong weightings give nearby lines: name the nearer one
        wrong_weights = sorted([(1 / plain_slope, unweighted), (1 / sq_slope, squared)],
                               key=lambda m: float(np.abs(np.asarray(b, float) - m[0]).max()))
        expect_close(b, 1 / slope, fn, case, "beta (bytes per second)", rtol=1e-3,
                     mistakes=[(slope, "you returned the fitted slope itself, in seconds per "
                                       "byte; beta is a bandwidth, in bytes per second."),
                               *wrong_weights],
                     fix="beta is a bandwidth: how does it relate to the slope of the "
                         "weighted line through the points (nbytes, seconds)?")
        expect_close(a, intercept, fn, case, "alpha (seconds)", rtol=1e-3, atol=1e-12,
                     mistakes=[(plain_intercept, unweighted), (sq_intercept, squared)],
                     fix="alpha is the intercept: the time of a message of zero bytes.")
        n_cases += 1
    passed(fn, n_cases)


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'ring_all_reduce': [
        ('draw 3 ranks and 3 chunks on paper: in reduce-scatter step s, rank r sends the chunk '
         'numbered r minus s and receives the one numbered one lower (both modulo N); after N-1 '
         'steps rank r holds the full sum of the chunk numbered r plus one (modulo N)'),
        ('pseudo-code: reduce-scatter, N-1 times: i = the chunk one below the one you send; '
         'incoming = an empty array shaped like chunk i; sendrecv(the chunk you send, right, '
         'incoming, left); add incoming into chunk i. All-gather, N-1 times: send the chunk you '
         'finished last (first the one you own), and receive straight into the chunk one lower. '
         'The two numbered steps of section 3 say what each phase does'),
    ],
    'fit_alpha_beta': [
        ('a weighted least-squares line: NumPy\'s polynomial fit of degree 1 accepts weights, '
         'and each weight multiplies its point\'s residual before it is squared. The relative '
         'error is the residual divided by the time: so what is each point\'s weight?'),
        ('pseudo-code: slope, intercept = the degree-1 fit of seconds against nbytes with weights '
         '___; alpha = ___; beta = ___ (the slope is seconds per byte, beta is bytes per second). '
         'The model is the first formula of section 4'),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'ring_all_reduce': ['one index lower', 'starts at your own rank', 'a copy, no add',
        'fresh buffer', 'r - s', 'r minus s', 'moves one index lower', 'straight into place',
        '(rank - step)', '(r + 1) % N'],
    'fit_alpha_beta': ['inverse of its time', 'inverse of the slope', '1 / seconds', '1/seconds',
        '1 / slope', '1/slope', 'w=1 /', 'weighted by the inverse', 'one over its time',
        'divided by its time'],
}
