"""Exercise checks: call one on your function and it says what is wrong, not just that
something is. For example ``dl.check.linear_backward(my_linear_backward)``.

Each check raises :class:`ExerciseError` (an AssertionError) with a message that names the
case that failed, what was expected and what your function gave, and prints a short
confirmation when everything passes.
"""
from .basics import (ExerciseError, cross_entropy, linear_backward,   # lessons 00-03
                     linear_forward, normalize_rows, perceptron_predict, perceptron_update,
                     relu_backward, sigmoid_ce_grad, softmax)
from .cnn import (accuracy, batchnorm_forward, conv2d_backward, conv2d_naive,  # lessons 04-07
                  conv_output_size, conv_params, im2col_simple, iterate_minibatches,
                  maxpool_backward, mlp_forward_batched, sgd_momentum_step)
from .kernels import (arithmetic_intensity, global_index, grid_size,  # lesson 08
                      tiled_matmul, warp_transactions)
from .playground import decision_grid, early_stop, mlp_parameter_count  # lesson 09
from .data_parallel import fit_alpha_beta, ring_all_reduce  # lesson 13

# Every check of every lesson (each submodule's __all__; a test keeps this list complete).
__all__ = [
    "ExerciseError",
    # lessons 00-03
    "normalize_rows", "perceptron_predict", "perceptron_update", "softmax", "cross_entropy",
    "sigmoid_ce_grad", "linear_forward", "linear_backward", "relu_backward",
    # lessons 04-07
    "iterate_minibatches", "accuracy", "sgd_momentum_step", "mlp_forward_batched",
    "conv_output_size", "conv2d_naive", "im2col_simple", "conv2d_backward", "maxpool_backward",
    "conv_params", "batchnorm_forward",
    # lesson 08
    "global_index", "grid_size", "warp_transactions", "tiled_matmul", "arithmetic_intensity",
    # lesson 09
    "decision_grid", "early_stop", "mlp_parameter_count",
    # lesson 13
    "ring_all_reduce", "fit_alpha_beta",
]
