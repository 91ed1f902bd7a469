"""The training steps the benchmark scripts time: dlcourse's and PyTorch's, for the same two
models on the same random data (float32): one step is forward, loss, backward, SGD update.

* MLP 784-512-512-10 on (N, 784);
* CNN conv(1→16, 3×3, pad 1)-ReLU-maxpool 2-conv(16→32, 3×3, pad 1)-ReLU-maxpool 2-
  Linear(32·7·7→10) on (N, 1, 28, 28).

Both losses come back as Python floats, so both steps wait for a GPU to finish. dlcourse's
step can also take ``dl.fit``'s mixed-precision path (``precision="bf16"`` or ``"fp16"``).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import dlcourse as dl  # noqa: E402
from dlcourse.precision import Policy  # noqa: E402  (what dl.fit(precision=...) does per step)

KINDS = ("mlp", "cnn")


def data(kind, batch, seed=0):
    """Random inputs and labels: x (batch, 784) or (batch, 1, 28, 28) float32, y (batch,)."""
    rng = np.random.default_rng(seed)
    shape = (batch, 784) if kind == "mlp" else (batch, 1, 28, 28)
    return rng.standard_normal(shape, dtype=np.float32), rng.integers(0, 10, batch)


VARIANTS = {
    "default": "the library as it is (on the GPU: Conv2d's im2col/col2im, the softmax "
               "cross-entropy and the optimizer's update are CUDA kernels)",
    "plain": "no hand-written kernels: plain CuPy (dl.use_kernels(..., False) for the model, "
             "the loss and the optimizer)",
    "fused": "dl.fuse(model): Linear/Conv2d + ReLU fused into one kernel, and the default's "
             "kernels",
}


def dlcourse_step(kind, batch, device="cpu", fused_loss=False, variant="default", precision="fp32"):
    """One dlcourse training step as a function of no arguments (returns the loss).

    variant: one of VARIANTS. fused_loss=True calls the fused softmax-CE CUDA kernel itself and
    leaves the loss on the GPU (dl.SoftmaxCrossEntropy runs the same kernel on the GPU but returns
    a Python float, which waits for the GPU): a step that never waits is what a CUDA graph
    needs. The step skips dL/dx of the input, as dl.fit and PyTorch do.

    precision: "bf16" or "fp16" gives the step ``dl.fit(precision=...)`` takes
    (dlcourse/precision.py's Policy: every matmul's inputs rounded under ``dl.autocast``, fp16
    with a ``dl.LossScaler``); "fp32" (the default) is the plain step, without the policy's few
    microseconds of Python per step.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}.")
    model = dl.MLP([784, 512, 512, 10], seed=0) if kind == "mlp" else \
        dl.CNN(in_channels=1, image_size=(28, 28), num_classes=10, seed=0)
    model.to(device)
    if variant == "fused":
        model = dl.fuse(model)
    x, y = (dl.to_device(a, device) for a in data(kind, batch))
    loss = dl.SoftmaxCrossEntropy()
    opt = dl.SGD(model, lr=0.01, momentum=0.9)
    amp = Policy(precision)
    for part in (model, loss, opt):
        dl.use_kernels(part, variant != "plain")
    if fused_loss:
        import dlcourse.kernels as K

    def loss_and_grad(logits):
        if fused_loss:
            return K.softmax_cross_entropy(logits, y)
        return loss.forward(logits, y), loss.backward()

    def step():
        value, dlogits = loss_and_grad(model.forward(x))
        model.backward(dlogits, input_grad=False)
        opt.step()
        return value

    def mixed_step():               # the step dl.fit(precision=...) takes (dlcourse/train.py)
        with amp.autocast():
            logits = model.forward(x)
        value, dlogits = loss_and_grad(logits)
        with amp.autocast():
            model.backward(amp.scale(dlogits), input_grad=False)
        if amp.should_step(model):  # fp16: False when a gradient overflowed (skipped step)
            opt.step()
        return value

    chosen = step if precision == "fp32" else mixed_step
    chosen.model, chosen.opt, chosen.amp = model, opt, amp
    return chosen


def torch_step(kind, batch, device="cpu"):
    """The same step in PyTorch (``device`` "cpu" or "cuda")."""
    import torch
    from torch import nn
    torch.manual_seed(0)
    if kind == "mlp":
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 10))
    else:
        model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(32 * 7 * 7, 10))
    model = model.to(device)
    x, y = (torch.from_numpy(a).to(device) for a in data(kind, batch))
    lossf = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step
