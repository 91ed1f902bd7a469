"""Hints in levels, and the reference solution on request (every lesson's exercises).

The first level is the ``# HINT:`` line in the exercise's cell (what to compute, the shapes and
the idea; in the student version it is the ``NotImplementedError`` text). Deeper levels live
here, one call at a time::

    dl.check.hint("conv2d_backward")       # the next level (2, then 3, ...)
    dl.check.hint("conv2d_backward", 1)    # a given level
    dl.check.solution("conv2d_backward")   # the reference solution, only when asked for

The last level may come close to code; the solution itself is never a hint.
"""
from __future__ import annotations

__all__ = ["hint", "solution", "HINTS"]

# name -> [level 2, level 3, ...]
HINTS: dict[str, list[str]] = {
    'normalize_rows': [
        ('sum the squares along the feature axis and keep that axis (keepdims), so the lengths '
         'broadcast against x (N, D)'),
        ('the row lengths should form an (N, 1) column: sum x * x over axis=1 with keepdims=True, '
         'take xp.sqrt, and divide x by them'),
    ],
    'perceptron_predict': [
        ('one matrix-vector product gives all N sums at once; a comparison gives booleans, which '
         'you then convert to integers'),
        ('the weighted sums X @ w + b have shape (N,); the step turns each into 1 where it is > 0 '
         'and 0 elsewhere (booleans to integers: .astype(np.int64))'),
    ],
    'perceptron_update': [
        'return new values rather than changing w in place: the caller still holds the old w',
        ('the step lr * (y - y_hat) is 0 when the prediction is right; move w by the step times x, '
         'and b by the step'),
    ],
    'sigmoid_ce_grad': [
        ('compute the sigmoid of z as the lesson writes it (it stays finite for large |z|), then '
         'subtract the labels'),
        ('prediction minus target: sigmoid(z) - y (the sigmoid is 1 / (1 + xp.exp(-z))), divided '
         'by N because the loss is a mean'),
    ],
    'softmax': [
        'the row maxima and row sums need keepdims so they broadcast against z (..., K)',
        ("subtract each row's max (z.max(axis=-1, keepdims=True)) before xp.exp, which changes "
         'nothing mathematically; then divide by the row sums'),
    ],
    'cross_entropy': [
        ('picking one entry per row needs two index arrays: the row numbers 0..N-1 and the labels; '
         'slicing every row with all the labels picks N*N entries'),
        ('log-softmax = shifted - log(sum of exp(shifted)) with shifted = logits minus the row '
         'max; then average -logp[xp.arange(N), labels]'),
    ],
    'softmax_ce_grad': [
        ("start from a copy of the probabilities and subtract 1 at each row's label only (one "
         "entry per row), then scale by 1/N"),
        ("index the copy with two arrays, the row numbers xp.arange(N) and the labels, to reach "
         "one entry per row"),
    ],
    'linear_forward': [
        'the cache holds the input and the weights, in that order',
        ('one matrix product plus the bias (it broadcasts over the rows); the cache is the pair '
         'linear_backward needs, (x, W)'),
    ],
    'linear_backward': [
        ('write the shapes under each other and let them tell you which matrix to transpose and in '
         'which order to multiply'),
        ('each gradient has the shape of its variable: combine dout with W for dx and with x for '
         'dW; b was added to every row, so db sums dout over the batch'),
    ],
    'relu_backward': [
        'build a 0/1 mask from the cached input, not from dout, and multiply',
        ('the gradient passes only where the input x was positive, and is 0 elsewhere (also where '
         'x == 0)'),
    ],
    'iterate_minibatches': [
        'shuffle an index array, never the data; the last batch may be shorter',
        ('order = a permutation of range(N) (or np.arange(N)); for start in range(0, N, '
         'batch_size): idx = order[start:start + batch_size]; yield X[idx], y[idx]'),
    ],
    'accuracy': [
        'compare the (N,) predictions with y and take the mean of the booleans',
        'predictions = logits.argmax(axis=1); return the mean of (predictions == y) as a float',
    ],
    'sgd_momentum_step': [
        ('use in-place operators on velocity[k] and params[k] (a model keeps references to those '
         'very arrays)'),
        ('velocity[k] = momentum * velocity[k] + grads[k]; then params[k] -= lr * velocity[k] (in '
         'place!)'),
    ],
    'dropout_forward': [
        "the mask holds 0 or 1/(1 - p); the output is x times the mask",
        "mask = a boolean array (uniform numbers >= p) divided by (1 - p)",
    ],
    'dropout_backward': [
        "dx is dout times the mask the forward returned (the scaled one)",
    ],
    'init_std': [
        ('write Var(out) = fan_in * Var(w) * E[x²] for one output; after a ReLU E[x²] is half the '
         'variance of its input, so He picks Var(w) = 2 / fan_in; Xavier asks the same of the '
         'backward pass (fan_out) and takes the harmonic compromise 2 / (fan_in + fan_out)'),
        ('the function returns a standard deviation: the square root of that variance, with '
         'np.sqrt, for the scheme asked'),
    ],
    'mlp_forward_batched': [
        "use xp's maximum against 0 for the ReLU, so the same code runs on NumPy and CuPy",
        'hidden = xp.maximum(X @ W1 + b1, 0) is (N, H); the logits are hidden @ W2 + b2 (N, K)',
    ],
    'conv_output_size': [
        'integer division counts the full strides that fit after the first window',
        ('the padded input has H + 2 * padding pixels; count the start positions 0, stride, '
         '2*stride, ... with // and do not forget the first one (+ 1)'),
    ],
    'conv2d_naive': [
        "the window spans all C channels and KH x KW pixels, exactly W[f]'s shape (C, KH, KW)",
        ('four loops over n, f, i, j; window = x_pad[n, :, i*stride:i*stride + KH, '
         'j*stride:j*stride + KW]; out[n, f, i, j] = (window * W[f]).sum() + b[f]'),
    ],
    'im2col_simple': [
        'the row index of window (n, i, j) is (n*OH + i)*OW + j',
        'loop over n, i, j: cols[(n * OH + i) * OW + j] = x[n, :, i:i + KH, j:j + KW].reshape(-1)',
    ],
    'maxpool_backward': [
        ('find the position of the maximum inside each window (argmax, then unravel it to a row '
         'and a column) and add dout there'),
        ('for each n, c, i, j: window = x[n, c, i*stride:i*stride + K, j*stride:j*stride + K]; kh, '
         'kw = np.unravel_index(window.argmax(), window.shape); dx[n, c, i*stride + kh, j*stride + '
         'kw] += dout[n, c, i, j]'),
    ],
    'conv2d_backward': [
        ('the same four loops as the forward pass; the window starts at (i*stride, j*stride); '
         'overlapping windows ADD into dx_pad'),
        ('db = dout.sum(axis=(0, 2, 3)); then loop over n, f, i, j with hs, ws = i*stride, '
         'j*stride: dW[f] += x_pad[n, :, hs:hs+KH, ws:ws+KW] * dout[n, f, i, j] and dx_pad[n, :, '
         'hs:hs+KH, ws:ws+KW] += W[f] * dout[n, f, i, j]'),
    ],
    'conv_params': [
        'count the weights of the (out_channels, in_channels, K, K) array and add the biases',
        ('weights W have shape (out_channels, in_channels, kernel_size, kernel_size); add one bias '
         'per output channel'),
    ],
    'batchnorm_forward': [
        'x_hat = (x - mean) / sqrt(var + eps), then gamma * x_hat + beta',
        ('mean = x.mean(axis=(0, 2, 3), keepdims=True) and var = x.var(axis=(0, 2, 3), '
         'keepdims=True) have shape (1, C, 1, 1); x_hat = (x - mean) / sqrt(var + eps); out = '
         'gamma.reshape(1, C, 1, 1) * x_hat + beta.reshape(1, C, 1, 1)'),
    ],
    'batchnorm_backward': [
        ("with d = dout * gamma (as (1, C, 1, 1)): dx = (d - mean(d) - x_hat * mean(d * x_hat)) / "
         "sqrt(var + eps), every mean over axes (0, 2, 3) with keepdims"),
        ("dbeta is the sum of dout and dgamma the sum of dout * x_hat over axes (0, 2, 3); check "
         "your dx against dl.gradcheck on a small input if the check's case is hard to read"),
    ],
    'global_index': [
        ("the blocks before this one hold block_idx * block_dim threads; add the thread's place "
         'inside its own block'),
    ],
    'grid_size': [
        'adding block - 1 before an integer division rounds up',
        'round n / block up with integers only: (n + block - 1) // block',
    ],
    'warp_transactions': [
        'count the distinct segment numbers',
        ('the segment of an address is address // segment_bytes; count how many different segments '
         'there are (np.unique)'),
    ],
    'tiled_matmul': [
        'copy only what lies inside the matrix into the top-left of each zero tile',
        ('copy A[i0:i0 + tile, k0:k0 + tile] and B[k0:k0 + tile, j0:j0 + tile] into zero (tile, '
         'tile) arrays As and Bs; then acc += As @ Bs'),
    ],
    'arithmetic_intensity': [
        'flops = 2 * tile_m * tile_n * K; bytes_loaded = itemsize * (tile_m * K + K * tile_n)',
    ],
    'bias_relu_backward': [
        ('x + b > 0 exactly where y > 0, so y alone gives the mask; the bias is added to every row, '
         'so its gradient adds up over the rows'),
        ('dx is dout masked by (y > 0), shape (N, F); db is dx summed over axis 0, shape (F,); '
         'return both'),
    ],
    'decision_grid': [
        ("the grid's first axis runs over the second coordinate (as meshgrid gives it); put the "
         'model back in training mode afterwards'),
        ("R values per axis over X's box widened by pad (np.linspace), np.meshgrid(xs, ys), the "
         'model on the (R*R, 2) points in eval mode, then dl.softmax'),
    ],
    'early_stop': [
        ('compare the last validation accuracy (if there is one) with target; return False to '
         'stop, True to go on'),
    ],
    'mlp_parameter_count': [
        'a Linear(d_in, d_out) layer has d_in * d_out weights and d_out biases',
    ],
    # lessons 10-11
    'loss_scale_step': [
        ('handle the overflow first and return at once; a clean step adds one to the count '
         'BEFORE it is compared with growth_interval'),
        ('with found_inf: the tuple (half the scale, 0, False); otherwise clean_steps + 1, and if '
         'that equals growth_interval: (twice the scale, 0, True), else (scale, the new count, '
         'True)'),
    ],
    'quantize_symmetric': [
        ('the scale is max(|x|) / 127, a number; int8 holds -128..127 but the symmetric range '
         'leaves -128 out, so that 0 stays exactly 0 and the range has no bias'),
        ('np.abs(x).max() gives the largest magnitude; round with np.rint (a cast to int8 alone '
         'cuts the fraction off), np.clip to -127..127, then .astype(np.int8)'),
    ],
    'magnitude_mask': [
        ('k = the sparsity fraction of w.size, rounded to an integer, is the number of weights to '
         'prune; np.argsort on the absolute values (flattened, axis=None) lists the smallest first'),
        ('start from a flat boolean array of w.size Trues, set the entries at the first k indices '
         'of the argsort of |w| to False, and reshape it to w.shape'),
    ],
    # lesson 12
    'fold_batchnorm': [
        ('write BatchNorm of the convolution output y as s * (y - mean) + beta with '
         's = gamma / sqrt(var + eps); y = W * x + b is linear, so s can move into W and b'),
        ('s has shape (F,): give it three axes of size 1 (s[:, None, None, None]) to scale the '
         'filters of W along axis 0; the folded bias is (b - mean) times s, plus beta'),
    ],
    'validate_batch': [
        ('np.asarray raises ValueError on ragged rows; x.dtype.kind tells integers (i, u) and '
         'floats (f) from strings (U) and booleans (b); np.isfinite finds NaN and infinity'),
        ('in order: x = np.asarray(inputs) (turn its ValueError into yours); refuse a dtype kind '
         'outside "iuf"; if x is 2-D with int(np.prod(shape)) columns, reshape it to (N,) + shape; '
         'refuse x.ndim == 0, len(x) == 0 or x.shape[1:] != shape; refuse non-finite values; '
         'return x as float32'),
    ],
    # lesson 13
    'ring_all_reduce': [
        ('draw 3 ranks and 3 chunks on paper: in reduce-scatter step s, rank r sends chunk r - s '
         'and receives chunk r - s - 1 (both modulo N); after N-1 steps rank r holds the full sum '
         'of chunk r + 1 (modulo N)'),
        ('reduce-scatter: for s in range(N - 1), receive into xp.empty_like of chunk '
         '(r - s - 1) % N with comm.sendrecv(send, right, recv, left), then add it into that '
         'chunk; all-gather: for s in range(N - 1), send chunk (r + 1 - s) % N and receive '
         'straight into chunk (r - s) % N'),
    ],
    'fit_alpha_beta': [
        ('np.polyfit(x, y, 1, w=...) fits a straight line and returns (slope, intercept); its '
         'weights multiply each residual, so weights 1 / seconds fit the relative error'),
        ('fit seconds against nbytes with degree 1 and weights 1 / seconds; alpha is the '
         'intercept and beta is 1 divided by the slope'),
    ],
    # lesson 14
    'unbroadcast': [
        ('the number of added leading axes is grad.ndim - len(shape); after summing them away, '
         'the axes to sum with keepdims=True are the indices i where shape[i] == 1'),
        ('grad.sum(axis=tuple(range(extra))) removes the leading axes; then '
         'grad.sum(axis=ones, keepdims=True) with ones the tuple of indices where shape has a 1 '
         '(skip each sum when its tuple of axes is empty)'),
    ],
    'tensor_mul': [
        ('for out = a * b: d out / d a = b and d out / d b = a, each times the gradient that '
         'arrives, out.grad; the product may have broadcast a or b to a bigger shape'),
        ('a.grad += the unbroadcast (yours, or dl.autograd.unbroadcast) of out.grad * b.data to '
         'a.shape, and the same for b with a.data and b.shape; += (never =) so that a tensor used '
         'twice gets both contributions'),
    ],
    'topological_order': [
        ('a tensor used twice is reached along two paths: keep a set of id(node) for the tensors '
         'already visited, and return at once for one of them'),
        ('only when the id of node is not yet in visited: add it to visited, call visit on '
         'every tensor in node.parents, then order.append(node) (after the parents, so the root '
         'comes last)'),
    ],
}

_shown: dict[str, int] = {}   # the deepest level shown so far in this session


def _levels(name: str) -> list[str]:
    from ..student import first_hint    # the notebooks are read only when a hint is asked for
    try:
        first = first_hint(name)
    except KeyError:
        if name not in HINTS:
            raise
        first = None
    return [first or "(this exercise's cell has no first-level hint)"] + HINTS.get(name, [])


def hint(name: str, level: int | None = None) -> str:
    """Print (and return) hint ``level`` of exercise ``name``; without ``level``, the next
    level after the deepest one shown so far (starting at 2: level 1 is in the cell)."""
    try:
        levels = _levels(name)
    except KeyError as err:
        raise KeyError(str(err.args[0])) from None
    if level is None:
        level = min(_shown.get(name, 1) + 1, len(levels))
    if not 1 <= level <= len(levels):
        raise ValueError(f"{name} has hints 1 to {len(levels)}; you asked for {level}.")
    _shown[name] = max(_shown.get(name, 1), level)
    text = f"Hint {level} of {len(levels)} for {name}: {levels[level - 1]}"
    if level == len(levels):
        text += (f"\n(That is the last hint. The reference solution: "
                 f"dl.check.solution({name!r}).)")
    else:
        text += f"\n(More: dl.check.hint({name!r}) again.)"
    print(text)
    return text


def solution(name: str) -> str:
    """Print (and return) the reference solution of exercise ``name``, from the instructor
    notebook. Try the hints first: writing it yourself is the exercise."""
    from ..student import find_exercise, solution_text
    path, _, _ = find_exercise(name)
    code = solution_text(name)
    print(f"Reference solution of {name} ({path.name}):\n\n{code}")
    return code
