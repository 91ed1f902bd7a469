"""Exercise checks: call one on your function and it says what is wrong, not just that
something is. For example ``dl.check.linear_backward(my_linear_backward)``.

Each check raises :class:`ExerciseError` (an AssertionError) with a message that names the
case that failed, what was expected and what your function gave, and prints a short
confirmation when everything passes. Stuck? ``dl.check.hint("linear_backward")`` gives the
next hint, one level at a time (level 1 first, the text of your cell's ``raise``);
``dl.check.solution("linear_backward")`` shows the reference solution once you have run the check
on an answer of your own and read the last hint, and ``dl.check.progress()`` shows what you have
done so far (your own record, kept in your workspace: ``learner_record.py``). Where a lesson
holds a derivation back, the check shows it when your answer passes
(``dl.check.derivation(name)`` shows it again). While a check runs your
function, the library is closed, and so is every package but NumPy and CuPy (``seal.py``): a
call into them fails the check, naming the call, except what the exercise opens.

The machinery the checks share is ``harness.py``; the checks of each lesson sit beside it, one
module per stretch of the course, each with a table of its checks and its ``HINTS``:

=========================  ===================================================================
module                     lessons
=========================  ===================================================================
``basics.py``              00-01: arrays on NumPy and CuPy, timing, the perceptron
``gradient_descent.py``    02a-02b: losses and their gradients, gradient descent
``backprop.py``            03: backpropagation
``training.py``            04a-04b: the training loop, optimizers and regularization
``playground.py``          04d: the playground
``init_and_batching.py``   04c-05: initialization, GPU batching
``convolution.py``         06a-06b: convolution, im2col, max pooling, their backward passes
``cnn.py``                 07: training a CNN
``residual.py``            07b: LayerNorm and residual networks
``cuda.py``                08a-08b: GPU execution and memory, tiling and the roofline
``gpu_performance.py``     08c-08d: bank conflicts and occupancy, fusion and launches
``tensor_cores.py``        08e: tensor cores by hand
``compression.py``         10, 11b: number formats and mixed precision, pruning
``quantization.py``        11a: int8 quantization, integer-only requantization
``deploy.py``              12-12b: from a checkpoint to a service, protecting a model
``data_parallel.py``       13: data parallelism
``sharding.py``            13b: overlapped buckets, ZeRO-1 sharding, recomputation
``capstone.py``            14: autograd
``recurrence.py``          14b: recurrent networks, backpropagation through time
``self_attention.py``      15-16: attention by hand, FlashAttention
``transformer_block.py``   15b: the transformer block and the language model
``tokens_and_block.py``    15c: byte-level BPE, RMSNorm, rotary positions
``flash_tiled.py``         16b: FlashAttention's tiled forward and backward
=========================  ===================================================================
"""
from .basics import normalize_rows, perceptron_predict, perceptron_update, time_it  # 00-01
from .gradient_descent import (cross_entropy, hinge_grad, sigmoid_ce_grad,  # lessons 02a-02b
                               sigmoid_derivative, softmax, softmax_ce_grad)
from .backprop import linear_backward, linear_forward, relu_backward  # lesson 03
from .training import (accuracy, adam_step, dropout_backward, dropout_forward,  # 04a-04b
                       iterate_minibatches, sgd_momentum_step)
from .init_and_batching import (batch_requests, dead_fraction, init_std,  # lessons 04c, 05
                                mlp_forward_batched)
from .convolution import (conv2d_backward, conv2d_naive, conv_output_size,  # lessons 06a-06b
                          conv_output_size_2d, im2col_simple, max_window_grad, maxpool_backward)
from .cnn import batchnorm_backward, batchnorm_forward, batchnorm_running, conv_params  # lesson 07
from .residual import layernorm_backward, residual_backward  # lesson 07b
from .cuda import (arithmetic_intensity, global_index, grid_size,  # lessons 08a-08b
                   tiled_matmul, warp_transactions)
from .gpu_performance import (bank_conflicts, bias_relu_backward,  # lessons 08c-08d
                              launches_per_step, occupancy)
from .tensor_cores import fragment_tiles, mma_sync, wmma_traffic  # lesson 08e
from .harness import ExerciseError, derivation
from .hints import hint, progress, solution
from .playground import decision_grid, early_stop, mlp_parameter_count  # lesson 04d
from .compression import (bf16_round, loss_scale_step, prune_conv_pair,  # lessons 10, 11b
                          magnitude_mask)
from .quantization import quantize_symmetric, requantize  # lesson 11a
from .deploy import fold_batchnorm, load_signed, two_time_pad, validate_batch  # lessons 12, 12b
from .data_parallel import fit_alpha_beta, ring_all_reduce  # lesson 13
from .sharding import (bucket_plan, recompute_memory, reduce_scatter,  # lesson 13b
                       sharded_adam_step)
from .capstone import tensor_mul, topological_order, unbroadcast  # lesson 14
from .recurrence import bptt, lstm_step_backward, rnn_step_backward  # lesson 14b
from .self_attention import (attention_backward, attention_bytes, causal_mask,  # lessons 15-16
                             merge_softmax)
from .transformer_block import (lm_loss, mha_forward, train_step,  # lesson 15b
                                transformer_block_backward)
from .tokens_and_block import bpe_merge_step, rmsnorm_backward, rope  # lesson 15c
from .flash_tiled import flash_backward, flash_forward_tiled  # lesson 16b

# Every check of every lesson (each submodule's __all__; a test keeps this list complete).
__all__ = [
    "ExerciseError", "hint", "solution", "derivation", "progress",
    # lessons 00-01 (basics.py)
    "normalize_rows", "perceptron_predict", "perceptron_update", "time_it",
    # lessons 02a (softmax, cross_entropy, softmax_ce_grad), 02b (sigmoid_derivative,
    # sigmoid_ce_grad, hinge_grad) (gradient_descent.py)
    "softmax", "cross_entropy", "softmax_ce_grad", "sigmoid_derivative", "sigmoid_ce_grad",
    "hinge_grad",
    # lesson 03 (backprop.py)
    "linear_forward", "linear_backward", "relu_backward",
    # lessons 04a-04b (training.py)
    "iterate_minibatches", "accuracy", "sgd_momentum_step", "dropout_forward",
    "dropout_backward", "adam_step",
    # lessons 04c and 05 (init_and_batching.py)
    "init_std", "dead_fraction", "mlp_forward_batched", "batch_requests",
    # lesson 04d (playground.py)
    "decision_grid", "early_stop", "mlp_parameter_count",
    # lessons 06a (conv_output_size ... im2col_simple), 06b (max_window_grad ...
    # conv2d_backward) (convolution.py)
    "conv_output_size", "conv_output_size_2d", "conv2d_naive", "im2col_simple",
    "max_window_grad", "maxpool_backward", "conv2d_backward",
    # lesson 07 (cnn.py)
    "conv_params", "batchnorm_forward", "batchnorm_running", "batchnorm_backward",
    # lesson 07b (residual.py)
    "layernorm_backward", "residual_backward",
    # lessons 08a (global_index, grid_size, warp_transactions), 08b (tiled_matmul,
    # arithmetic_intensity) (cuda.py)
    "global_index", "grid_size", "warp_transactions", "tiled_matmul", "arithmetic_intensity",
    # lessons 08c (bank_conflicts, occupancy), 08d (bias_relu_backward, launches_per_step)
    # (gpu_performance.py)
    "bank_conflicts", "occupancy", "bias_relu_backward", "launches_per_step",
    # lesson 08e (tensor_cores.py)
    "mma_sync", "fragment_tiles", "wmma_traffic",
    # lessons 10-11b
    "loss_scale_step", "bf16_round", "quantize_symmetric", "requantize", "magnitude_mask",
    "prune_conv_pair",
    # lessons 12 and 12b
    "fold_batchnorm", "validate_batch", "load_signed", "two_time_pad",
    # lesson 13
    "ring_all_reduce", "fit_alpha_beta",
    # lesson 13b (sharding.py)
    "bucket_plan", "reduce_scatter", "sharded_adam_step", "recompute_memory",
    # lesson 14
    "unbroadcast", "tensor_mul", "topological_order",
    # lesson 14b (recurrence.py)
    "rnn_step_backward", "bptt", "lstm_step_backward",
    # lessons 15-16 (self_attention.py)
    "attention_backward", "causal_mask", "merge_softmax", "attention_bytes",
    # lesson 15b (transformer_block.py)
    "mha_forward", "transformer_block_backward", "lm_loss", "train_step",
    # lesson 15c (tokens_and_block.py)
    "bpe_merge_step", "rmsnorm_backward", "rope",
    # lesson 16b (flash_tiled.py)
    "flash_forward_tiled", "flash_backward",
]
