"""Exercise checks: call one on your function and it says what is wrong, not just that
something is. For example ``dl.check.linear_backward(my_linear_backward)``.

Each check raises :class:`ExerciseError` (an AssertionError) with a message that names the
case that failed, what was expected and what your function gave, and prints a short
confirmation when everything passes. Stuck? ``dl.check.hint("linear_backward")`` gives the
next hint, one level at a time; ``dl.check.solution("linear_backward")`` shows the reference
solution, only when you ask for it. Where a lesson holds a derivation back, the check shows it
when your answer passes (``dl.check.derivation(name)`` shows it again). While a check runs your
function, the library's own version of what you are building is refused.

The machinery the checks share is ``harness.py``; the checks of each lesson sit beside it
(``basics.py`` 00-03, ``cnn.py`` 04-07, ``cuda.py`` 08a-08b, ``playground.py`` 09).
"""
from .basics import (cross_entropy, linear_backward, linear_forward,  # lessons 00-03
                     normalize_rows, perceptron_predict, perceptron_update, relu_backward,
                     sigmoid_ce_grad, sigmoid_derivative, softmax, softmax_ce_grad)
from .cnn import (accuracy, batchnorm_backward, batchnorm_forward,  # lessons 04-07
                  conv2d_backward, conv2d_naive, conv_output_size, conv_params, dropout_backward,
                  dropout_forward, im2col_simple, init_std, iterate_minibatches,
                  maxpool_backward, mlp_forward_batched, sgd_momentum_step)
from .cnn import adam_step, batchnorm_running, conv_output_size_2d, max_window_grad  # 04-07 new
from .cuda import (arithmetic_intensity, bias_relu_backward, global_index,  # lessons 08a-08c
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
    # lessons 00-03
    "normalize_rows", "perceptron_predict", "perceptron_update", "softmax", "cross_entropy",
    "softmax_ce_grad", "sigmoid_derivative", "sigmoid_ce_grad", "linear_forward", "linear_backward", "relu_backward",
    # lessons 04-07
    "iterate_minibatches", "accuracy", "sgd_momentum_step", "dropout_forward",
    "dropout_backward", "init_std", "mlp_forward_batched",
    "conv_output_size", "conv2d_naive", "im2col_simple", "conv2d_backward", "maxpool_backward",
    "conv_params", "batchnorm_forward", "batchnorm_backward",
    "adam_step", "conv_output_size_2d", "max_window_grad", "batchnorm_running",
    # lessons 08a (global_index, grid_size, warp_transactions), 08b (tiled_matmul,
    # arithmetic_intensity), 08c (bias_relu_backward)
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
