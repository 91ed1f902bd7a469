"""dlcourse: deep learning from first principles, on NumPy (CPU) and CuPy (GPU) with one code path.

    import dlcourse as dl
    model = dl.MLP([64, 128, 10])
    loss = dl.SoftmaxCrossEntropy()
    opt = dl.SGD(model, lr=0.1, momentum=0.9)

The course notebooks (``notebooks/``) grow each part of this package step by step.
"""
from .backend import (DeviceError, describe_device, device_info, device_of, get_array_module,
                      get_device, gpu_available, manual_seed, set_device, synchronize,
                      to_device, to_numpy)
from . import check, data, distributed, plots, recorded
from .conv import Conv2d, MaxPool2d, col2im, im2col
from .fusion import Conv2dReLU, LinearReLU, fuse, use_kernels
from .threaded import use_threads       # lesson 07: CPU passes split between threads (off)
from .gradcheck import gradcheck
from .layers import (BatchNorm2d, Dropout, Flatten, GlobalAvgPool2d, Identity, Layer, LayerNorm,
                     Linear, ReLU, Residual, Sequential, Sigmoid, Tanh)
from .losses import (MSELoss, MulticlassHingeLoss, SigmoidCrossEntropy, SoftmaxCrossEntropy,
                     log_softmax, softmax)
from .models import CNN, MLP, Perceptron, ResNet
from .optim import SGD, Adagrad, Adam, AdamW, RMSprop, clip_grad_norm
from .stats import layer_stats
from .schedules import cosine_decay, linear_warmup, per_epoch, step_decay
from .train import History, StopTraining, TrainingDiverged, evaluate, fit
from .metrics import confusion_matrix
from .checkpoint import CheckpointError, load, save
from .precision import LossScaler, autocast
from .prune import (choose_sparsities, prune, prune_channels, prune_gradually,
                    prune_sensitivity, pruning_schedule, sparsity)
from .quantize import QuantConv2d, QuantLinear, quantize
from .fast_inference import infer                      # lesson 12: from checkpoint to service
from . import inference
from .export import ExportError, export_onnx  # (onnx itself is imported on first use)
from . import protect                  # lesson 12b (cryptography imported on first use)
from .timing import timeit
from .attention import MultiHeadAttention, attention                  # lessons 15-16: attention
from .flash_attention import flash_attention
from .transformer import (GELU, Embedding, FeedForward, PositionalEmbedding, SequenceCrossEntropy,
                          Transformer, TransformerBlock)
from .generate import generate                      # lesson 15: sampling, with a key/value cache
from .modern_block import RMSNorm, SwiGLU, rope, rope_backward   # Llama's block (issue 42)
from .recurrent import LSTM, RNN, RecurrentLM       # issue 42: sequences before attention
from .zero import ShardedOptimizer                    # lesson 13b: ZeRO-1
from .recompute import recompute                      # lesson 13b: activation recomputation
from .memory import memory_report                     # lesson 13b: where a step's memory goes
from .transformer_functions import PluggedTransformer, train_language_model   # lesson 15b

from ._version import __version__

__all__ = [
    # backend
    "DeviceError", "describe_device", "device_info", "device_of", "get_array_module",
    "get_device", "gpu_available", "manual_seed", "set_device", "synchronize", "to_device",
    "to_numpy",
    # timing (lesson 00's rule: warm up, repeat, median, synchronize)
    "timeit",
    # submodules
    "check", "data", "distributed", "plots", "recorded",
    # layers, losses, models, optimizers
    "Conv2d", "MaxPool2d", "col2im", "im2col", "gradcheck", "use_threads",
    "BatchNorm2d", "Dropout", "Flatten", "Identity", "Layer", "Linear", "ReLU", "Sequential",
    "Sigmoid", "Tanh",
    # normalization over the last axes and residual networks (lesson 07b)
    "LayerNorm", "GlobalAvgPool2d", "Residual",
    # fused layers (lesson 08d)
    "Conv2dReLU", "LinearReLU", "fuse", "use_kernels",
    "MSELoss", "MulticlassHingeLoss", "SigmoidCrossEntropy", "SoftmaxCrossEntropy",
    "log_softmax", "softmax",
    "CNN", "MLP", "Perceptron", "ResNet",
    "SGD", "Adagrad", "RMSprop", "Adam", "AdamW", "clip_grad_norm",
    # training and checkpoints
    "step_decay", "cosine_decay", "linear_warmup", "per_epoch", "layer_stats",
    "History", "StopTraining", "TrainingDiverged", "confusion_matrix", "evaluate", "fit",
    "CheckpointError", "load", "save",
    # smaller and faster models (lessons 10-11b)
    "LossScaler", "autocast", "prune", "prune_gradually", "pruning_schedule", "sparsity",
    "prune_sensitivity", "choose_sparsities", "prune_channels",
    "QuantConv2d", "QuantLinear", "quantize",
    # from checkpoint to service (lesson 12)
    "infer", "inference", "ExportError", "export_onnx",
    # attention and a small transformer (lessons 15-16)
    "attention", "flash_attention", "MultiHeadAttention", "Embedding", "PositionalEmbedding",
    "GELU", "FeedForward", "TransformerBlock", "Transformer", "SequenceCrossEntropy",
    "generate", "PluggedTransformer", "train_language_model",
    # the modern block: RMSNorm, rotary positions, SwiGLU (Llama's)
    "RMSNorm", "SwiGLU", "rope", "rope_backward",
    # recurrent layers and the recurrent character model (sequences, before attention)
    "RNN", "LSTM", "RecurrentLM",
    # past one device's limits (lesson 13b)
    "ShardedOptimizer", "recompute", "memory_report",
]


def __getattr__(name):
    # dl.widgets needs ipywidgets: imported on first use, so `import dlcourse` stays light.
    if name == "widgets":
        import importlib
        return importlib.import_module(".widgets", __name__)
    raise AttributeError(f"module 'dlcourse' has no attribute {name!r}")
