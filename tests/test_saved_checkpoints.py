"""Checkpoints written by an earlier version of dlcourse load, and give the same outputs.

The files in tests/data/ were saved by the code at commit ed81c28, before the layers were
rewritten (issue 17): an MLP, a CNN with BatchNorm after two training steps (so its running
statistics are not their initial values) in evaluation mode, and a fused CNN (dl.fuse)
(checkpoint format 1). The ``*_format2`` files were saved by the code at commit e504163
(checkpoint format 2: two .npy entries): an MLP, a CNN with BatchNorm after one epoch, in
evaluation mode, and an int8 MLP (dl.quantize)."""
from pathlib import Path

import numpy as np
import pytest

import dlcourse as dl

DATA = Path(__file__).parent / "data"
EXPECTED = DATA / "ckpt_expected_outputs_ed81c28.npz"


@pytest.mark.parametrize("name, file", [("mlp", "ckpt_mlp_ed81c28.npz"),
                                        ("cnn", "ckpt_cnn_batchnorm_ed81c28.npz"),
                                        ("fused", "ckpt_fused_cnn_ed81c28.npz")])
def test_a_checkpoint_saved_before_the_rewrite_loads_and_computes_the_same(name, file, device, to_dev):
    model = dl.load(DATA / file, device=device).eval()   # BatchNorm: the running statistics
    with np.load(EXPECTED) as expected:
        x, want = expected[f"{name}_x"], expected[f"{name}_out"]
    got = dl.to_numpy(model.forward(to_dev(x)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["mlp", "cnn", "int8"])
def test_a_format_2_checkpoint_loads_and_computes_the_same(name, device, to_dev):
    model = dl.load(DATA / f"ckpt_{name}_format2.npz", device=device).eval()
    with np.load(DATA / "ckpt_expected_outputs_format2.npz") as expected:
        x, want = expected[f"{name}_x"], expected[f"{name}_out"]
    got = dl.to_numpy(model.forward(to_dev(x)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
