"""The lesson 15 and 16 exercise checks (dlcourse/check/self_attention.py): a right answer passes,
and each common wrong answer gets the message that names its mistake.

Each wrong answer is a small function named after its mistake, written as a learner would."""
import math

import numpy as np
import pytest

import dlcourse as dl
import dlcourse.check as C
from support.expect import expect_fail



# ---- attention_backward
def att_parts(dout, cache, jac="right", scale=True, transpose_v=True, transpose_k=True):
    q, k, v, p = cache
    s = 1 / math.sqrt(q.shape[-1]) if scale else 1.0
    dv = (p.swapaxes(-1, -2) if transpose_v else p) @ dout
    dp = dout @ v.swapaxes(-1, -2)
    if jac == "right":
        ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    elif jac == "diagonal":
        ds = p * dp
    elif jac == "axis":
        ds = p * (dp - (dp * p).sum(axis=-2, keepdims=True))
    else:  # "none"
        ds = dp
    dq = ds @ k * s
    dk = (ds.swapaxes(-1, -2) if transpose_k else ds) @ q * s
    return dq, dk, dv


def att_good(dout, cache):
    return att_parts(dout, cache)


def att_diagonal_jacobian(dout, cache):
    return att_parts(dout, cache, jac="diagonal")


def att_sum_over_queries(dout, cache):
    return att_parts(dout, cache, jac="axis")


def att_skips_softmax(dout, cache):
    return att_parts(dout, cache, jac="none")


def att_no_scale(dout, cache):
    return att_parts(dout, cache, scale=False)


def att_p_not_transposed(dout, cache):
    return att_parts(dout, cache, transpose_v=False)


def att_library(dout, cache):
    return dl.attention.__globals__["attention_backward"](dout, cache)


def att_writes_dout(dout, cache):
    out = att_parts(dout, cache)
    dout *= 0
    return out


def test_attention_backward_passes_the_right_answer(capsys):
    C.attention_backward(att_good)
    assert "all" in capsys.readouterr().out


def att_full_jacobian(dout, cache):
    """Right values, but the rule broken: the (Tk, Tk) Jacobian of every row, all at once."""
    q, k, v, p = cache
    s = 1 / math.sqrt(q.shape[-1])
    dp = dout @ v.swapaxes(-1, -2)
    jac = p[..., :, None] * (np.eye(p.shape[-1]) - p[..., None, :])     # (N, H, Tq, Tk, Tk)
    ds = np.einsum("nhqij,nhqi->nhqj", jac, dp)
    return ds @ k * s, ds.swapaxes(-1, -2) @ q * s, p.swapaxes(-1, -2) @ dout


def att_jacobian_row_by_row(dout, cache):
    """Right values, the rule broken one row at a time: diag(p) - p p^T for each row."""
    q, k, v, p = cache
    s = 1 / math.sqrt(q.shape[-1])
    dp = dout @ v.swapaxes(-1, -2)
    ds = np.empty_like(p)
    for row in np.ndindex(p.shape[:-1]):
        ds[row] = (np.diag(p[row]) - np.outer(p[row], p[row])) @ dp[row]
    return ds @ k * s, ds.swapaxes(-1, -2) @ q * s, p.swapaxes(-1, -2) @ dout


def att_einsum(dout, cache):
    """Right, written differently: einsum throughout."""
    q, k, v, p = cache
    s = 1 / math.sqrt(q.shape[-1])
    dv = np.einsum("nhqk,nhqd->nhkd", p, dout)
    dp = np.einsum("nhqd,nhkd->nhqk", dout, v)
    ds = p * (dp - np.einsum("nhqk,nhqk->nhq", p, dp)[..., None])
    return np.einsum("nhqk,nhkd->nhqd", ds, k) * s, np.einsum("nhqk,nhqd->nhkd", ds, q) * s, dv


def att_loop_over_heads(dout, cache):
    """Right, written differently: a loop over (sample, head), each row's sum by a product."""
    q, k, v, p = cache
    xp = dl.get_array_module(p)
    dq, dk, dv = xp.zeros_like(q), xp.zeros_like(k), xp.zeros_like(v)
    s = 1 / math.sqrt(q.shape[-1])
    for n, h in np.ndindex(q.shape[:2]):
        P, dP = p[n, h], dout[n, h] @ v[n, h].T
        dS = P * (dP - ((P * dP) @ xp.ones(P.shape[1]))[:, None])
        dq[n, h], dk[n, h], dv[n, h] = dS @ k[n, h] * s, dS.T @ q[n, h] * s, P.T @ dout[n, h]
    return dq, dk, dv


@pytest.mark.parametrize("fn", [att_full_jacobian, att_jacobian_row_by_row])
def test_attention_backward_refuses_a_tk_by_tk_matrix(fn):
    """The lesson's rule, "without building the Tk x Tk matrix" (issue 37): right values with a
    per-row Jacobian are refused, naming the rule."""
    expect_fail(C.attention_backward, fn, "Tk x Tk matrix", "1024 x 1024",
                "without building the Tk x Tk matrix")


@pytest.mark.parametrize("fn", [att_good, att_einsum, att_loop_over_heads])
def test_attention_backward_passes_answers_written_differently(fn, device, capsys):
    """On NumPy, and with the CuPy case on the stand-in (or a GPU) too."""
    C.attention_backward(fn)
    where = "NumPy and CuPy" if device == "gpu" else "NumPy"
    assert f"all {6 if device == 'gpu' else 5} cases pass ({where})" in capsys.readouterr().out


@pytest.mark.parametrize("fn, words", [
    (att_diagonal_jacobian, ["taken as diagonal", "EVERY score"]),
    (att_sum_over_queries, ["wrong axis", "LAST axis"]),
    (att_skips_softmax, ["skips the softmax"]),
    (att_no_scale, ["1/sqrt(d)"]),
    (att_p_not_transposed, ["transposed"]),
    (att_library, ["library's own version"]),
    (att_writes_dout, ["changed its input dout"]),
])
def test_attention_backward_names_the_mistake(fn, words):
    expect_fail(C.attention_backward, fn, *words)


# ---- causal_mask
def mask_good(Tq, Tk):
    return np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + (Tk - Tq)


def mask_strict(Tq, Tk):
    return np.arange(Tk)[None, :] < np.arange(Tq)[:, None] + (Tk - Tq)


def mask_future(Tq, Tk):
    return np.arange(Tk)[None, :] >= np.arange(Tq)[:, None] + (Tk - Tq)


def mask_top_left(Tq, Tk):
    return np.tril(np.ones((Tq, Tk), dtype=bool))


def mask_floats(Tq, Tk):
    return mask_good(Tq, Tk).astype(np.float32)


def mask_library(Tq, Tk):
    from dlcourse.attention import causal_mask
    return causal_mask(Tq, Tk)


def test_causal_mask_passes_the_right_answer(capsys):
    C.causal_mask(mask_good)
    assert "all 5 cases pass" in capsys.readouterr().out


@pytest.mark.parametrize("fn, words", [
    (mask_strict, ["OWN position"]),
    (mask_future, ["AFTER the query"]),
    (mask_top_left, ["LAST Tq positions"]),
    (mask_floats, ["not bool"]),
    (mask_library, ["library's own version"]),
])
def test_causal_mask_names_the_mistake(fn, words):
    expect_fail(C.causal_mask, fn, *words)


# ---- merge_softmax
def merge_good(m1, l1, o1, m2, l2, o2):
    m = np.maximum(m1, m2)
    finite = np.where(np.isfinite(m), m, 0.0)      # a row masked in both blocks: m = -inf
    a1, a2 = np.exp(m1 - finite), np.exp(m2 - finite)
    l = a1 * l1 + a2 * l2
    return m, l, (a1 * l1 * o1 + a2 * l2 * o2) / np.where(l > 0, l, 1.0)


def merge_guarded_by_where(m1, l1, o1, m2, l2, o2):
    """Right, written differently: the factor of a masked block set to 0 where it is one."""
    m = np.maximum(m1, m2)
    with np.errstate(invalid="ignore", divide="ignore"):
        a1 = np.where(np.isneginf(m1), 0.0, np.exp(m1 - m))
        a2 = np.where(np.isneginf(m2), 0.0, np.exp(m2 - m))
        l = a1 * l1 + a2 * l2
        return m, l, np.where(l > 0, (a1 * l1 * o1 + a2 * l2 * o2) / l, 0.0)


def merge_unguarded(m1, l1, o1, m2, l2, o2):
    m = np.maximum(m1, m2)
    with np.errstate(invalid="ignore"):
        a1, a2 = np.exp(m1 - m), np.exp(m2 - m)
    l = a1 * l1 + a2 * l2
    return m, l, (a1 * l1 * o1 + a2 * l2 * o2) / l


def merge_guards_l_only(m1, l1, o1, m2, l2, o2):
    m = np.maximum(m1, m2)
    finite = np.where(np.isfinite(m), m, 0.0)
    a1, a2 = np.exp(m1 - finite), np.exp(m2 - finite)
    l = a1 * l1 + a2 * l2
    with np.errstate(invalid="ignore"):
        return m, l, (a1 * l1 * o1 + a2 * l2 * o2) / l


def merge_no_rescale(m1, l1, o1, m2, l2, o2):
    return np.maximum(m1, m2), l1 + l2, (l1 * o1 + l2 * o2) / (l1 + l2)


def merge_unnormalised(m1, l1, o1, m2, l2, o2):
    m, l, _ = merge_good(m1, l1, o1, m2, l2, o2)
    return m, l, np.exp(m1 - m) * l1 * o1 + np.exp(m2 - m) * l2 * o2


def merge_upside_down(m1, l1, o1, m2, l2, o2):
    m = np.maximum(m1, m2)
    b1, b2 = np.exp(m - m1), np.exp(m - m2)
    return m, b1 * l1 + b2 * l2, o1


def merge_overflows(m1, l1, o1, m2, l2, o2):
    m = np.maximum(m1, m2)
    with np.errstate(all="ignore"):
        l = (np.exp(m1) * l1 + np.exp(m2) * l2) / np.exp(m)
    return m, l, o1


def merge_with_softmax(m1, l1, o1, m2, l2, o2):
    w = dl.softmax(np.concatenate([m1 + np.log(l1), m2 + np.log(l2)], axis=1))
    m = np.maximum(m1, m2)
    return m, l1, w[:, :1] * o1 + w[:, 1:] * o2


def test_merge_softmax_passes_the_right_answer(capsys):
    C.merge_softmax(merge_good)
    C.merge_softmax(merge_guarded_by_where)
    assert capsys.readouterr().out.count("all 5 cases pass") == 2


@pytest.mark.parametrize("fn, words", [
    (merge_no_rescale, ["DIFFERENT maxima"]),
    (merge_unnormalised, ["not normalised"]),
    (merge_upside_down, ["upside down"]),
    (merge_overflows, ["overflows"]),
    # two fully masked blocks (issue 37): an unguarded merge gives nan there
    (merge_unguarded, ["entirely masked in BOTH blocks", "l is nan in row 1", "m = -inf, l = 0, o = 0"]),
    (merge_guards_l_only, ["BOTH blocks", "o holds nan in row 1", "0 / 0"]),
    (merge_with_softmax, ["library's own version"]),
])
def test_merge_softmax_names_the_mistake(fn, words):
    expect_fail(C.merge_softmax, fn, *words)


def test_the_merge_check_reference_is_attention_over_both_blocks():
    """The check's expected (m, l, o) come from the softmax over the concatenated scores:
    the merge of the two halves equals dl.attention on one query row."""
    from dlcourse.check.self_attention import _partial
    r = np.random.default_rng(0)
    s, v = r.standard_normal((3, 7)), r.standard_normal((7, 2))
    m, l, o = _partial(s, v)
    got = merge_good(*_partial(s[:, :3], v[:3]), *_partial(s[:, 3:], v[3:]))
    np.testing.assert_allclose(got[2], o)
    np.testing.assert_allclose(got[1], l)
    # the same o as dl.attention with scores s: q k^T / sqrt(d) = s for k = identity rows
    q = s[None, None] * math.sqrt(7)
    k, v7 = np.eye(7)[None, None], np.zeros((1, 1, 7, 7))
    v7[0, 0, :, :2] = v
    np.testing.assert_allclose(dl.attention(q, k, v7)[0, 0, :, :2], o, atol=1e-12)


# ---- attention_bytes (naive and tiled)
def bytes_parts(N, H, T, d, itemsize, Br, causal, naive=None, tiles=None, rows=None, lse=True,
                kv=2):
    """An answer to attention_bytes, right by default: ``naive`` replaces the naive count per
    (sample, head), ``tiles`` the number of query tiles, ``rows(i0, i1)`` the key rows a causal
    tile reads; ``lse`` and ``kv`` (arrays streamed per tile) put the other mistakes in."""
    per = 4 * T * T + 4 * T * d if naive is None else naive(T, d)
    n = math.ceil(T / Br) if tiles is None else tiles(T, Br)
    if causal:
        keys = sum((rows or (lambda i0, i1: i1))(i0, min(i0 + Br, T)) for i0 in range(0, T, Br))
    else:
        keys = n * T
    tiled = 2 * T * d + kv * keys * d + (T if lse else 0)
    return N * H * per * itemsize, N * H * tiled * itemsize


def bytes_good(*args):
    return bytes_parts(*args)


def bytes_closed_form(N, H, T, d, itemsize, Br, causal):
    """Right, written differently: closed forms, floats, a NumPy scalar, a list."""
    n = -(-T // Br)
    keys = Br * n * (n - 1) / 2 + T if causal else float(n * T)
    per_head = np.int64(2 * T * (2 * T + 2 * d))
    return [N * H * itemsize * per_head, N * H * itemsize * (2 * T * d + 2 * keys * d + T)]


def _bytes(**wrong):
    return lambda *args: bytes_parts(*args, **wrong)


def bytes_library(N, H, T, d, itemsize, Br, causal):
    from dlcourse.flash_attention import attention_traffic
    counts = attention_traffic(N, H, T, d, itemsize, block=(Br, Br), causal=causal)
    return counts["naive"], counts["flash"]


def test_attention_bytes_passes_the_right_answer_and_one_written_differently(capsys):
    C.attention_bytes(bytes_good)
    C.attention_bytes(bytes_closed_form)
    assert capsys.readouterr().out.count("all 8 cases pass") == 2


def _elements(N, H, T, d, itemsize, Br, causal):
    naive, tiled = bytes_good(N, H, T, d, itemsize, Br, causal)
    return naive // itemsize, tiled


@pytest.mark.parametrize("fn, words", [
    (_elements, ["naive is", "counts elements"]),
    (_bytes(naive=lambda T, d: 2 * T * T + 4 * T * d), ["softmax step is missing"]),
    (_bytes(naive=lambda T, d: 3 * T * T + 4 * T * d), ["one T x T pass is missing"]),
    (lambda N, H, *a: bytes_parts(1, 1, *a), ["one head of one sample"]),
    (lambda N, H, T, d, b, Br, c: bytes_parts(N, H, T, d, b, Br, c,
                                               naive=(lambda T, d: 2 * T * (T + 1) + 4 * T * d)
                                               if c else None),
     ["masks entries in place", "causal or not"]),
    (_bytes(tiles=lambda T, Br: 1), ["k and v once in all", "PER QUERY TILE"]),
    (_bytes(tiles=lambda T, Br: T // Br), ["T=100", "rounded DOWN", "round T / Br up"]),
    (_bytes(tiles=lambda T, Br: T / Br), ["T=100", "not a whole number"]),
    (_bytes(lse=False), ["log-sum-exp is missing"]),
    (_bytes(kv=1), ["v is streamed with k"]),
    (lambda N, H, T, d, b, Br, c: bytes_parts(N, H, T, d, b, Br, False)[:1]
     + bytes_parts(N, H, T, d, b, Br, False)[1:], ["causal", "up to its own last row"]),
    (_bytes(rows=lambda i0, i1: sum(range(i0 + 1, i1 + 1))), ["per TILE, not per row"]),
    (_bytes(rows=lambda i0, i1: i0), ["LAST row", "not up to its first"]),
    (lambda N, H, T, d, b, Br, c: bytes_parts(N, H, T, d, b, Br, c, rows=lambda i0, i1: i0 + Br),
     ["does not read past T"]),
    (bytes_library, ["library's own version"]),
], ids=["elements", "no_softmax", "one_square_pass", "one_head", "naive_causal", "kv_once",
        "floor_tiles", "fractional_tiles", "no_lse", "no_v", "causal_ignored", "per_row",
        "first_row", "past_T", "library"])
def test_attention_bytes_names_the_mistake(fn, words):
    expect_fail(C.attention_bytes, fn, *words)
