"""Answers to lessons 15b and 16b's exercises, for tests/test_check_flagship.py: right ones
(as the notebooks' solutions; each works on NumPy and on CuPy arrays, the checks' GPU case), and
the mistakes the checks must name are made from them by replacing one line (the test's
``MISTAKES``). lm_loss and the two FlashAttention functions make their arrays with
``xp = dl.get_array_module(...)``: made with ``np.`` they would be on the host."""
import numpy as np
import dlcourse as dl
from dlcourse.attention import attention_backward, attention_forward

def mha_forward(x, Wq, Wk, Wv, Wo, n_heads, causal):
    N, T, D = x.shape
    d = D // n_heads
    def split(y):
        return y.reshape(N, T, n_heads, d).transpose(0, 2, 1, 3)
    a = dl.attention(split(x @ Wq), split(x @ Wk), split(x @ Wv), causal=causal)
    out = a.transpose(0, 2, 1, 3).reshape(N, T, D) @ Wo
    return out

GELU_C, GELU_A = np.sqrt(2 / np.pi), 0.044715

def transformer_block_backward(dout, cache):
    p, H, causal = cache["params"], cache["heads"], cache["causal"]
    N, T, D = dout.shape
    d = D // H
    def split(y):
        return y.reshape(N, T, H, d).transpose(0, 2, 1, 3)
    def merge(y):
        return y.transpose(0, 2, 1, 3).reshape(N, T, D)
    def ln_backward(dy, gamma, xhat, inv_std):
        dxh = dy * gamma
        return (dxh - dxh.mean(axis=-1, keepdims=True)
                - xhat * (dxh * xhat).mean(axis=-1, keepdims=True)) * inv_std
    grads = {}
    rows = (0, 1)
    grads["b2"] = dout.sum(axis=rows)
    grads["W2"] = np.einsum("ntf,ntd->fd", cache["g"], dout)
    u = cache["u"]
    t = np.tanh(GELU_C * (u + GELU_A * u ** 3))
    du = (dout @ p["W2"].T) * (0.5 * (1 + t) + 0.5 * u * (1 - t * t) * GELU_C * (1 + 3 * GELU_A * u * u))
    grads["b1"] = du.sum(axis=rows)
    grads["W1"] = np.einsum("ntd,ntf->df", cache["f_in"], du)
    df_in = du @ p["W1"].T
    grads["ln2.gamma"] = (df_in * cache["xhat2"]).sum(axis=rows)
    grads["ln2.beta"] = df_in.sum(axis=rows)
    dh = dout + ln_backward(df_in, p["ln2.gamma"], cache["xhat2"], cache["inv_std2"])
    a_in = cache["a_in"]
    q, k, v = (split(a_in @ p[f"W{n}"]) for n in "qkv")
    a, att_cache = attention_forward(q, k, v, causal=causal)
    grads["Wo"] = np.einsum("ntd,nte->de", merge(a), dh)
    dq, dk, dv = attention_backward(split(dh @ p["Wo"].T), att_cache)
    da_in = 0
    for n, dy in (("q", dq), ("k", dk), ("v", dv)):
        grads[f"W{n}"] = np.einsum("ntd,nte->de", a_in, merge(dy))
        da_in = da_in + merge(dy) @ p[f"W{n}"].T
    grads["ln1.gamma"] = (da_in * cache["xhat1"]).sum(axis=rows)
    grads["ln1.beta"] = da_in.sum(axis=rows)
    dx = dh + ln_backward(da_in, p["ln1.gamma"], cache["xhat1"], cache["inv_std1"])
    return dx, grads

def lm_loss(logits, tokens, pad_id=None):
    xp = dl.get_array_module(logits)
    B, T, V = logits.shape
    z = logits[:, :-1]
    y = tokens[:, 1:]
    keep = xp.ones(y.shape, dtype=bool) if pad_id is None else y != pad_id
    count = max(int(keep.sum()), 1)
    z = z - z.max(axis=-1, keepdims=True)
    logp = z - xp.log(xp.exp(z).sum(axis=-1, keepdims=True))
    picked = xp.take_along_axis(logp, y[..., None], axis=-1)[..., 0]
    loss = -(picked * keep).sum() / count
    d = xp.exp(logp)
    d[xp.arange(B)[:, None], xp.arange(T - 1)[None, :], y] -= 1
    dlogits = xp.zeros_like(logits)
    dlogits[:, :-1] = d * keep[..., None] / count
    return loss, dlogits

def train_step(model, lm_loss, tokens, state, lr, weight_decay, max_norm):
    b1, b2, eps = 0.9, 0.999, 1e-8
    logits = model.forward(tokens)
    loss, dlogits = lm_loss(logits, tokens)
    model.backward(dlogits)
    params, grads = model.params, model.grads
    norm = np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads.values()))
    clip = max_norm / norm if norm > max_norm else 1.0
    state["t"] = t = state.get("t", 0) + 1
    for key, p in params.items():
        g = grads[key] * clip
        m = state.setdefault(key + "/m", np.zeros_like(p))
        v = state.setdefault(key + "/v", np.zeros_like(p))
        p *= 1 - lr * weight_decay
        m[...] = b1 * m + (1 - b1) * g
        v[...] = b2 * v + (1 - b2) * g * g
        p -= lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return loss

def flash_forward_tiled(q, k, v, block_q, block_k, causal):
    xp = dl.get_array_module(q)
    N, H, Tq, d = q.shape
    Tk = k.shape[2]
    scale = 1 / np.sqrt(d)
    out = xp.empty_like(q)
    lse = xp.empty((N, H, Tq), dtype=q.dtype)
    for i0 in range(0, Tq, block_q):
        i1 = min(i0 + block_q, Tq)
        qi = q[:, :, i0:i1] * scale
        m = xp.full((N, H, i1 - i0, 1), -xp.inf)
        l = xp.zeros((N, H, i1 - i0, 1))
        o = xp.zeros((N, H, i1 - i0, d))
        for j0 in range(0, Tk, block_k):
            j1 = min(j0 + block_k, Tk)
            s = qi @ k[:, :, j0:j1].swapaxes(-1, -2)
            if causal:
                seen = xp.arange(j0, j1)[None, :] <= xp.arange(i0, i1)[:, None] + (Tk - Tq)
                s = xp.where(seen, s, -xp.inf)
            m_new = xp.maximum(m, s.max(axis=-1, keepdims=True))
            safe = xp.where(xp.isfinite(m_new), m_new, 0)
            p = xp.exp(s - safe)
            alpha = xp.exp(m - safe)
            l = alpha * l + p.sum(axis=-1, keepdims=True)
            o = alpha * o + p @ v[:, :, j0:j1]
            m = m_new
        out[:, :, i0:i1] = o / xp.where(l > 0, l, 1)
        lse[:, :, i0:i1] = (m + xp.log(xp.where(l > 0, l, 1)))[..., 0]
    return out, lse

def flash_backward(dout, q, k, v, out, lse, block_q, block_k, causal):
    xp = dl.get_array_module(q)
    N, H, Tq, d = q.shape
    Tk = k.shape[2]
    scale = 1 / np.sqrt(d)
    D = (dout * out).sum(axis=-1, keepdims=True)
    dq, dk, dv = xp.zeros_like(q), xp.zeros_like(k), xp.zeros_like(v)
    for j0 in range(0, Tk, block_k):
        j1 = min(j0 + block_k, Tk)
        for i0 in range(0, Tq, block_q):
            i1 = min(i0 + block_q, Tq)
            s = q[:, :, i0:i1] @ k[:, :, j0:j1].swapaxes(-1, -2) * scale
            if causal:
                seen = xp.arange(j0, j1)[None, :] <= xp.arange(i0, i1)[:, None] + (Tk - Tq)
                s = xp.where(seen, s, -xp.inf)
            p = xp.exp(s - lse[:, :, i0:i1, None])
            dv[:, :, j0:j1] += p.swapaxes(-1, -2) @ dout[:, :, i0:i1]
            dp = dout[:, :, i0:i1] @ v[:, :, j0:j1].swapaxes(-1, -2)
            ds = p * (dp - D[:, :, i0:i1])
            dq[:, :, i0:i1] += ds @ k[:, :, j0:j1] * scale
            dk[:, :, j0:j1] += ds.swapaxes(-1, -2) @ q[:, :, i0:i1] * scale
    return dq, dk, dv
