"""Recurrent layers: a vanilla RNN and an LSTM, with backpropagation through time by hand, and
the character model built from them.

Written for the sequences lesson, notebook ``14b_recurrent_networks`` (issue 42: between the
autograd capstone, lesson 14, and attention, lesson 15); ``dlcourse train --model lstm
--dataset text`` trains the model on the same text as lesson 15's transformer. Batch-first like
the rest of the library: x (N, T, D).

* :class:`RNN` ``(input_size, hidden)``: h_t = tanh(x_t Wx + h_{t-1} Wh + b);
* :class:`LSTM` ``(input_size, hidden)``: four gates from one product, a = x_t Wx + h_{t-1} Wh
  + b, split as PyTorch does into i, f, g, o; c_t = f*c_{t-1} + i*g, h_t = o*tanh(c_t);
* :class:`RecurrentLM` ``(vocab, hidden, layers, kind="lstm")``: Embedding -> RNN/LSTM x
  layers -> Linear: token ids (N, T) -> logits (N, T, vocab), trained by ``dl.fit`` with
  ``dl.SequenceCrossEntropy``, continued by ``dl.generate`` (the state is its "cache").

**Truncated backpropagation through time.** ``forward(x, state=None)`` unrolls the T steps of
one window from ``state`` (None: zeros) and leaves the last state in ``layer.state``; pass it
to the next window's forward to carry the memory on (``reset_state()`` forgets it). ``backward``
runs the T steps back and stops at the window's start: the carried state is a constant to this
window, so no gradient flows into the previous one (that is the truncation). The gradient that
would have gone on, dL/d(state), is left in ``layer.dstate``; ``backward(dout, dstate=...)``
takes it into the previous window's backward, which is backpropagation through both windows
untruncated (the tests show the two add up to one long window's gradient).

**The fast part is the input's.** x_t Wx for all T steps is one (N*T, D) @ (D, H) product, done
before the loop; only h_{t-1} Wh must wait for the step before. In backward the same: the loop
computes da_t, one step at a time, and dWx, dWh, db and dx are then one product each over all
steps. The arrays decide the backend (NumPy or CuPy), as everywhere in the library.
"""
from __future__ import annotations

import numpy as np

from ._validate import check_input, float_dtype, shape_str, whole_number
from .backend import get_array_module, rng
from .layer_base import Container, Layer, checked
from .layers import Linear
from .ops import matmul
from .transformer import Embedding, check_tokens

__all__ = ["RNN", "LSTM", "RecurrentLM", "sigmoid"]


def sigmoid(a):
    """1 / (1 + exp(-a)), written as 0.5 (1 + tanh(a / 2)): the same number, no overflow."""
    xp = get_array_module(a)
    return 0.5 * (1 + xp.tanh(0.5 * a))


class _Recurrent(Layer):
    """What RNN and LSTM share: the weights, the input checks, the carried state.

    params["Wx"]: (D, G·H), params["Wh"]: (H, G·H), params["b"]: (G·H,), G = 1 (RNN) or 4
    (LSTM), all uniform in [-1/sqrt(H), 1/sqrt(H)] as PyTorch draws them."""

    input_shape, input_ndim = "(N, T, D)", 3
    gates = 1
    state_parts = ("h",)

    def __init__(self, input_size: int, hidden: int, dtype=np.float32, seed=None):
        super().__init__()
        name = type(self).__name__
        self.input_size = D = whole_number(input_size, f"{name}(input_size=...)")
        self.hidden = H = whole_number(hidden, f"{name}(hidden=...)")
        gen, k, G = rng(seed), 1 / np.sqrt(H), self.gates
        self.params = {key: gen.uniform(-k, k, shape).astype(float_dtype(dtype))
                       for key, shape in (("Wx", (D, G * H)), ("Wh", (H, G * H)), ("b", (G * H,)))}
        self.state = None
        self.dstate = None

    def reset_state(self):
        """Forget the carried state: the next ``forward(x, state=layer.state)`` starts at zeros."""
        self.state = None
        return self

    def map_arrays(self, fn):           # a move or a cast: the carried state is stale too
        self.reset_state()
        return super().map_arrays(fn)

    def input_projection(self, x):
        """x (N, T, D) -> x_t Wx + b for every t at once: (N, T, G·H), one product."""
        N, T, D = x.shape
        return (matmul(x.reshape(N * T, D), self.params["Wx"]) + self.params["b"]).reshape(N, T, -1)

    def weight_grads(self, x, h_prev, da):
        """Fill grads from da (N, T, G·H), the gradient at every step's pre-activation, and
        return dx (N, T, D): each one product over all N·T steps."""
        N, T, D = x.shape
        da2 = da.reshape(N * T, -1)
        self.grads = {"Wx": matmul(x.reshape(N * T, D).T, da2),
                      "Wh": matmul(h_prev.reshape(N * T, self.hidden).T, da2),
                      "b": da2.sum(axis=0)}
        return matmul(da2, self.params["Wx"].T).reshape(N, T, D)

    def start_state(self, x, state):
        """The state at t = 0, one (N, H) array per part: zeros, or ``state`` checked."""
        xp, N, H = get_array_module(x), x.shape[0], self.hidden
        if state is None:
            return tuple(xp.zeros((N, H), dtype=x.dtype) for _ in self.state_parts)
        parts = (state,) if len(self.state_parts) == 1 else state
        name, want = type(self).__name__, " and ".join(f"{p} (N, H)" for p in self.state_parts)
        if not isinstance(parts, (tuple, list)) or len(parts) != len(self.state_parts):
            raise TypeError(f"{name}(hidden={H}) takes state= as {want}, as layer.state holds "
                            f"after a forward; got {type(state).__name__}.")
        for part in parts:
            check_input(self, part, 2, "(N, H)", params_like=self.params["Wh"])
            if tuple(part.shape) != (N, H):
                raise ValueError(f"{name}(hidden={H}) got a state of shape "
                                 f"{shape_str(part.shape)} for x of {N} sequences: it must be "
                                 f"({N}, {H}). A state carried from a batch of another size "
                                 f"does not fit: call reset_state() (or pass state=None).")
        return tuple(parts)

    def end_grad(self, h0, dstate):
        """The gradient arriving at the last state from after the window: zeros (None), or
        ``dstate`` (the next window's ``layer.dstate``: backpropagation not truncated)."""
        if dstate is None:
            return tuple(get_array_module(h0).zeros_like(h0) for _ in self.state_parts)
        parts = (dstate,) if len(self.state_parts) == 1 else tuple(dstate)
        if len(parts) != len(self.state_parts) or any(
                getattr(p, "shape", None) != h0.shape for p in parts):
            raise ValueError(f"{type(self).__name__}.backward(dout, dstate=...) takes the "
                             f"gradient of the last state, shaped like layer.state "
                             f"({len(self.state_parts)} array(s) of shape {shape_str(h0.shape)}).")
        return parts

    def check(self, x):
        super().check(x)
        if x.shape[-1] != self.input_size:
            raise ValueError(f"{type(self).__name__}(input_size={self.input_size}) got x of shape "
                             f"{shape_str(x.shape)}: the last axis must be {self.input_size} "
                             f"(batch-first: x is (N, T, D), N sequences of T steps of D "
                             f"numbers). Is x (T, N, D) or (N, D, T)? Then transpose it.")

    def get_config(self):
        return {"input_size": self.input_size, "hidden": self.hidden}


class RNN(_Recurrent):
    """The vanilla (Elman) RNN with tanh: x (N, T, D) -> every hidden state hs (N, T, H).

    Forward, for t = 1..T from h_0 (``state``, zeros when None)::

        h_t = tanh(x_t Wx + h_{t-1} Wh + b)

    Backward through time: the gradient reaching h_t is dout_t plus what h_{t+1} sends back;
    through tanh (1 - h_t²), it is da_t, and h_{t-1} receives da_t Wh^T. Then dWx = Σ x_t^T da_t,
    dWh = Σ h_{t-1}^T da_t, db = Σ da_t, dx_t = da_t Wx^T. ``layer.state`` after forward: h_T
    (N, H); ``layer.dstate`` after backward: dL/dh_0 (N, H), where truncation cuts.
    Equal to ``torch.nn.RNN(D, H, batch_first=True)`` with weight_ih = Wx^T, weight_hh = Wh^T,
    bias_ih + bias_hh = b."""

    @checked
    def forward(self, x, state=None):
        xp = get_array_module(x)
        N, T, _ = x.shape
        (h,) = h0 = self.start_state(x, state)
        xw, Wh = self.input_projection(x), self.params["Wh"]           # (N, T, H)
        hs = xp.empty((N, T, self.hidden), dtype=x.dtype)
        for t in range(T):
            h = xp.tanh(xw[:, t] + matmul(h, Wh))
            hs[:, t] = h
        self.cache = (x, h0[0], hs)
        self.state = h
        return hs

    @checked
    def backward(self, dout, dstate=None):
        x, h0, hs = self.cache
        xp, Wh = get_array_module(dout), self.params["Wh"]
        da = xp.empty_like(hs)
        (dh_next,) = self.end_grad(h0, dstate)            # zeros: nothing comes back from after T
        for t in reversed(range(dout.shape[1])):
            da[:, t] = (dout[:, t] + dh_next) * (1 - hs[:, t] * hs[:, t])    # tanh' = 1 - h²
            dh_next = matmul(da[:, t], Wh.T)
        self.dstate = dh_next                             # dL/dh_0: not sent further
        h_prev = xp.concatenate([h0[:, None], hs[:, :-1]], axis=1)
        return self.weight_grads(x, h_prev, da)


class LSTM(_Recurrent):
    """The LSTM (Hochreiter & Schmidhuber, 1997): x (N, T, D) -> every hidden state (N, T, H).

    Forward, for t = 1..T from (h_0, c_0) (``state``, zeros when None)::

        a = x_t Wx + h_{t-1} Wh + b                     (N, 4H): four blocks of H
        i, f, o = σ(a_i), σ(a_f), σ(a_o);  g = tanh(a_g)    (PyTorch's order: i, f, g, o)
        c_t = f * c_{t-1} + i * g
        h_t = o * tanh(c_t)

    Backward through time: dh = dout_t + (from h_{t+1});
    dc = (from c_{t+1}) + dh·o·(1 - tanh²c_t);
    then di = dc·g, df = dc·c_{t-1}, dg = dc·i, do = dh·tanh(c_t), each times its
    nonlinearity's derivative (σ' = σ(1 - σ), tanh' = 1 - tanh²) gives da_t; h_{t-1} receives
    da_t Wh^T and c_{t-1} receives dc·f: the cell's path is a product of forget gates, not of
    Wh's, which is why the gradient survives longer. ``layer.state``: (h_T, c_T); ``dstate``:
    (dL/dh_0, dL/dc_0). Equal to ``torch.nn.LSTM(D, H, batch_first=True)`` with
    weight_ih = Wx^T, weight_hh = Wh^T, bias_ih + bias_hh = b."""

    gates = 4
    state_parts = ("h", "c")

    @checked
    def forward(self, x, state=None):
        xp = get_array_module(x)
        N, T, _ = x.shape
        H = self.hidden
        h, c = h0, c0 = self.start_state(x, state)
        xw, Wh = self.input_projection(x), self.params["Wh"]           # (N, T, 4H)
        acts = xp.empty((N, T, 4 * H), dtype=x.dtype)                     # i, f, g, o after σ/tanh
        cs, tcs = xp.empty((N, T, H), dtype=x.dtype), xp.empty((N, T, H), dtype=x.dtype)
        hs = xp.empty((N, T, H), dtype=x.dtype)
        for t in range(T):
            a = xw[:, t] + matmul(h, Wh)
            i, f, g, o = sigmoid(a[:, :H]), sigmoid(a[:, H:2 * H]), xp.tanh(a[:, 2 * H:3 * H]), \
                sigmoid(a[:, 3 * H:])
            c = f * c + i * g
            tc = xp.tanh(c)
            h = o * tc
            acts[:, t] = xp.concatenate([i, f, g, o], axis=1)
            cs[:, t], tcs[:, t], hs[:, t] = c, tc, h
        self.cache = (x, h0, c0, acts, cs, tcs, hs)
        self.state = (h, c)
        return hs

    @checked
    def backward(self, dout, dstate=None):
        x, h0, c0, acts, cs, tcs, hs = self.cache
        xp, Wh, H = get_array_module(dout), self.params["Wh"], self.hidden
        da = xp.empty_like(acts)
        dh_next, dc_next = self.end_grad(h0, dstate)
        for t in reversed(range(dout.shape[1])):
            i, f, g, o = (acts[:, t, k * H:(k + 1) * H] for k in range(4))
            c_prev = cs[:, t - 1] if t > 0 else c0
            dh = dout[:, t] + dh_next
            dc = dc_next + dh * o * (1 - tcs[:, t] * tcs[:, t])
            da[:, t, :H] = dc * g * i * (1 - i)                      # di · σ'
            da[:, t, H:2 * H] = dc * c_prev * f * (1 - f)            # df · σ'
            da[:, t, 2 * H:3 * H] = dc * i * (1 - g * g)             # dg · tanh'
            da[:, t, 3 * H:] = dh * tcs[:, t] * o * (1 - o)          # do · σ'
            dh_next, dc_next = matmul(da[:, t], Wh.T), dc * f
        self.dstate = (dh_next, dc_next)                  # dL/d(h_0, c_0): not sent further
        h_prev = xp.concatenate([h0[:, None], hs[:, :-1]], axis=1)
        return self.weight_grads(x, h_prev, da)


# ==== The character model =============================================================
class RecurrentLM(Container):
    """A recurrent language model for characters (or any tokens)::

        ids (N, T) -> Embedding(vocab, H) -> RNN or LSTM (H, H) x layers -> Linear(H, vocab)
                   -> logits (N, T, vocab)

    ``kind``: "lstm" (default) or "rnn". Causal by construction: h_t has seen ids[:, :t+1]
    only. Train with ``dl.SequenceCrossEntropy`` (``dl.fit`` on X, Y: (N, T), Y = X shifted by
    one): each batch of windows starts from a zero state, and backpropagation stops at the
    window's start. ``forward(ids, state=None)`` leaves the last state of every layer in
    ``model.state`` (a list); :meth:`step` is generation's form, ``(ids, state) -> (logits,
    state)``, so ``dl.generate`` runs one new token per step with no limit on the context.
    Keys: ``embedding.W``, ``rnn.<i>.Wx|Wh|b``, ``head.W|b``. ``chars``: as for
    ``dl.Transformer``, kept in the config so that ``dlcourse generate`` reads a text prompt.
    """

    layer_names = ("embedding", "rnn", "head")
    input_dtype = np.dtype(np.int64)
    max_len = None              # no position table: any length (dl.generate reads this)
    recurrent = True

    def __init__(self, vocab: int, hidden: int, layers: int = 1, kind: str = "lstm",
                 dtype=np.float32, seed=None, chars=None):
        self.vocab = whole_number(vocab, "RecurrentLM(vocab=...)")
        self.hidden = whole_number(hidden, "RecurrentLM(hidden=...)")
        self.n_layers = whole_number(layers, "RecurrentLM(layers=...)")
        if kind not in ("lstm", "rnn"):
            raise ValueError(f"RecurrentLM(kind=...) is 'lstm' or 'rnn', got {kind!r}.")
        if chars is not None and (not isinstance(chars, str) or len(chars) != self.vocab):
            raise ValueError(f"RecurrentLM(chars=...) names the character of each of the "
                             f"{self.vocab} ids: a str of {self.vocab} characters, got "
                             f"{chars!r:.60}.")
        self.kind, self.chars, self.state = kind, chars, None
        gen = rng(seed) if seed is not None else None
        cell = LSTM if kind == "lstm" else RNN
        H = self.hidden
        self.embedding = Embedding(self.vocab, H, dtype=dtype, seed=_child_seed(gen))
        self.rnn = _Stack(*[cell(H, H, dtype=dtype, seed=_child_seed(gen))
                            for _ in range(self.n_layers)])
        self.head = Linear(H, self.vocab, dtype=dtype, seed=_child_seed(gen), init="xavier")
        super().__init__(self.embedding, self.rnn, self.head)

    @checked
    def forward(self, idx, state=None):
        N, T = idx.shape
        h = self.embedding.forward(idx)                                  # (N, T, H)
        states = [None] * self.n_layers if state is None else list(state)
        for layer, s in zip(self.rnn.layers, states):
            h = layer.forward(h, s)
        self.state = [layer.state for layer in self.rnn.layers]
        return self.head.forward(h.reshape(N * T, self.hidden)).reshape(N, T, self.vocab)

    @checked
    def backward(self, dlogits):
        N, T, V = dlogits.shape
        dh = self.head.backward(dlogits.reshape(N * T, V)).reshape(N, T, self.hidden)
        for layer in reversed(self.rnn.layers):
            dh = layer.backward(dh)
        self.embedding.backward(dh)
        return None

    def step(self, idx, state=None):
        """Generation: idx (N, T_new), the new ids only, and the state the previous call
        returned (None at the start) -> (logits (N, T_new, vocab), state)."""
        logits = self.forward(idx, state)
        return logits, self.state

    def reset_state(self):
        self.state = None
        for layer in self.rnn.layers:
            layer.reset_state()
        return self

    def generate(self, prompt, steps: int, *, temperature: float = 1.0, top_k=None, seed=None):
        """Continue ``prompt`` by ``steps`` sampled ids, carrying the state (``dl.generate``)."""
        from .generate import generate
        return generate(self, prompt, steps, temperature=temperature, top_k=top_k, seed=seed)

    def check(self, idx):
        check_tokens(f"RecurrentLM(vocab={self.vocab})", idx, self.vocab)

    def get_config(self):
        return {"vocab": self.vocab, "hidden": self.hidden, "layers": self.n_layers,
                "kind": self.kind, **({"chars": self.chars} if self.chars is not None else {})}


class _Stack(Container):
    """The recurrent layers of a RecurrentLM, named by their index (keys ``rnn.0.Wx``, ...).
    The model runs them itself (each takes its own state); this only holds them."""

    def get_config(self):          # rebuilt by RecurrentLM from its own config
        return {}


def _child_seed(gen):
    """A seed for one layer drawn from the model's own generator (None: the global one)."""
    return None if gen is None else int(gen.integers(2**31))
