"""Derivation and shortcut cases of lessons 08a-08e and 04d, dlcourse/check/cuda.py (08a-08b),
gpu_performance.py (08c-08d), tensor_cores.py (08e) and playground.py (04d) (see __init__.py).

No shortcut case (nothing in the library computes it, so nothing to refuse): global_index,
warp_transactions, arithmetic_intensity, bank_conflicts, occupancy, fragment_tiles,
wmma_traffic, launches_per_step (pure
counting; the library has no launch counter) and
early_stop (the library has no early-stopping callback)."""

DERIVED: dict[str, list[str]] = {
    "global_index": [r"blockIdx\.x\*blockDim\.x\+threadIdx\.x", r"block_idx\*block_dim"],
    "grid_size": [r"\(n\+block-1\)//block", r"-\(-n//block\)"],
    "warp_transactions": [r"unique\(addresses//segment_bytes\)", r"len\(np\.unique", r"len\(set\("],
    "tiled_matmul": [r"acc\+=As@Bs", r"\+=As@Bs"],
    "arithmetic_intensity": [r"2·tile_m·tile_n·K|2\*tile_m\*tile_n\*K",
                             r"tile_m·K\+K·tile_n|tile_m\*K\+K\*tile_n|\(tile_m\+tile_n\)"],
    "bank_conflicts": [r"unique\(addresses//bank_bytes\)|np\.unique\(", r"words%n_banks",
                       r"bincount"],
    "occupancy": [r"min\(", r"registers_per_sm//\(registers_per_thread\*threads_per_block\)",
                  r"shared_bytes_per_block\+reserved", r"blocks\*threads_per_block/threads_per_sm"],
    "bias_relu_backward": [r"dout\*\(y>0\)|dout\*mask|dout\[n,f\]·1\[", r"dx\.sum\(axis=0\)",
                           r"Σovernofdx"],
    "launches_per_step": [r"12\+2\+15\+6", r"4-2=2,so15"],
    "mlp_parameter_count": [r"d_in\*d_out\+d_out|d_in·d_out\+d_out|\(d_in\+1\)·d_out"],
    "mma_sync": [r"astype\(np\.float32\)@", r"a\.astype\(", r"float32\)@b"],
    "fragment_tiles": [r"w(arp)?//warps_n", r"w(arp)?%warps_n", r"\+16\*i"],
    "wmma_traffic": [r"\(FM\+FN\)", r"FM\+FN", r"block_k//16"],
}

SHORTCUTS: dict[str, tuple[str, str]] = {
    "grid_size": ("grid_size", '''def grid_size(n, block):
    return dl.kernels._build.ceil_div(n, block)'''),
    "grid_size_launch_config": ("grid_size", '''def grid_size(n, block):
    return dl.kernels.launch_config("optimizer_update", n).grid[0]'''),
    "tiled_matmul": ("tiled_matmul", '''def tiled_matmul(A, B, tile):
    return dl.kernels.reference.matmul(A, B)'''),
    "bias_relu_backward": ("bias_relu_backward", '''def bias_relu_backward(dout, y):
    return dl.kernels.reference.bias_relu_backward_ref(dout, y)'''),
    "bias_relu_backward_fusion": ("bias_relu_backward", '''def bias_relu_backward(dout, y):
    return dl.fusion.bias_relu_backward(dout, y)'''),
    "decision_grid_by_hand": ("decision_grid", '''def decision_grid_by_hand(model, X, resolution, pad):
    return dl.widgets.decision_grid(model, X, resolution=resolution, pad=pad)[0]'''),
    "mlp_parameter_count": ("mlp_parameter_count", '''def mlp_parameter_count(sizes):
    return dl.MLP(sizes, seed=0).num_parameters()'''),
    "mma_sync": ("mma_sync", '''def mma_sync(a, b, c):
    return dl.kernels.matmul_wmma(a, b) + c'''),
    "mma_sync_reference": ("mma_sync", '''def mma_sync(a, b, c):
    return dl.kernels.reference.matmul_fp16(a, b) + c'''),
    "mlp_parameter_count_widgets": ("mlp_parameter_count", '''def mlp_parameter_count(sizes):
    return dl.widgets.count_parameters(sizes)'''),
}
