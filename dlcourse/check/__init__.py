"""Exercise checks: call one on your function and it says what is wrong, not just that
something is. For example ``dl.check.linear_backward(my_linear_backward)``.

Each check raises :class:`ExerciseError` (an AssertionError) with a message that names the
case that failed, what was expected and what your function gave, and prints a short
confirmation when everything passes. Stuck? ``dl.check.hint("linear_backward")`` gives the
next hint, one level at a time; ``dl.check.solution("linear_backward")`` shows the reference
solution, only when you ask for it. Where a lesson holds a derivation back, the check shows it
when your answer passes (``dl.check.derivation(name)`` shows it again). While a check runs your
function, the library's own version of what you are building is refused.

The machinery the checks share is ``harness.py``; the checks of each lesson sit beside it, one
module per stretch of the course, each with a table of its checks and its ``HINTS``:

=========================  ===================================================================
module                     lessons
=========================  ===================================================================
``basics.py``              00-02: arrays, the perceptron, loss and gradient descent
``backprop.py``            03: backpropagation
``training.py``            04: training an MLP on digits
``init_and_batching.py``   04c-05: initialization, GPU batching
``convolution.py``         06: convolution
``cnn.py``                 07: training a CNN
``cuda.py``                08a-08d: GPU execution and memory, tiling and occupancy, fusion
``playground.py``          09: the playground
``compression.py``         10-11: number formats and mixed precision, quantization and pruning
``deploy.py``              12: from a checkpoint to a service
``data_parallel.py``       13: data parallelism
``capstone.py``            14: autograd
=========================  ===================================================================
"""
from .basics import (cross_entropy, normalize_rows, perceptron_predict,  # lessons 00-02
                     perceptron_update, sigmoid_ce_grad, sigmoid_derivative, softmax,
                     softmax_ce_grad)
from .backprop import linear_backward, linear_forward, relu_backward  # lesson 03
from .training import (accuracy, adam_step, dropout_backward, dropout_forward,  # lesson 04a
                       iterate_minibatches, sgd_momentum_step)
from .init_and_batching import init_std, mlp_forward_batched  # lessons 04c, 05
from .convolution import (conv2d_backward, conv2d_naive, conv_output_size,  # lesson 06
                          conv_output_size_2d, im2col_simple, max_window_grad, maxpool_backward)
from .cnn import batchnorm_backward, batchnorm_forward, batchnorm_running, conv_params  # lesson 07
from .cuda import (arithmetic_intensity, bias_relu_backward, global_index,  # lessons 08a-08d
                   grid_size, tiled_matmul, warp_transactions)
from .harness import ExerciseError, derivation
from .hints import hint, solution
from .playground import decision_grid, early_stop, mlp_parameter_count  # lesson 09
from .compression import loss_scale_step, magnitude_mask, quantize_symmetric  # lessons 10-11
from .deploy import fold_batchnorm, validate_batch  # lesson 12
from .data_parallel import fit_alpha_beta, ring_all_reduce  # lesson 13
from .capstone import tensor_mul, topological_order, unbroadcast  # lesson 14

# Every check of every lesson (each submodule's __all__; a test keeps this list complete).
__all__ = [
    "ExerciseError", "hint", "solution", "derivation",
    # lessons 00-02 (basics.py)
    "normalize_rows", "perceptron_predict", "perceptron_update", "softmax", "cross_entropy",
    "softmax_ce_grad", "sigmoid_derivative", "sigmoid_ce_grad",
    # lesson 03 (backprop.py)
    "linear_forward", "linear_backward", "relu_backward",
    # lesson 04a (training.py)
    "iterate_minibatches", "accuracy", "sgd_momentum_step", "dropout_forward",
    "dropout_backward", "adam_step",
    # lessons 04c and 05 (init_and_batching.py)
    "init_std", "mlp_forward_batched",
    # lesson 06 (convolution.py)
    "conv_output_size", "conv_output_size_2d", "conv2d_naive", "im2col_simple",
    "max_window_grad", "maxpool_backward", "conv2d_backward",
    # lesson 07 (cnn.py)
    "conv_params", "batchnorm_forward", "batchnorm_running", "batchnorm_backward",
    # lessons 08a (global_index, grid_size, warp_transactions), 08b (tiled_matmul,
    # arithmetic_intensity), 08d (bias_relu_backward)
    "global_index", "grid_size", "warp_transactions", "tiled_matmul", "arithmetic_intensity",
    "bias_relu_backward",
    # lesson 09
    "decision_grid", "early_stop", "mlp_parameter_count",
    # lessons 10-11
    "loss_scale_step", "quantize_symmetric", "magnitude_mask",
    # lesson 12
    "fold_batchnorm", "validate_batch",
    # lesson 13
    "ring_all_reduce", "fit_alpha_beta",
    # lesson 14
    "unbroadcast", "tensor_mul", "topological_order",
]
