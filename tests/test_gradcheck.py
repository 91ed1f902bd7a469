"""gradcheck never reports agreement it did not establish: NaN or inf in either gradient,
nothing compared, a meaningless eps, complex input or a class instead of a layer are errors,
never a small number. Each case runs on every backend."""
import numpy as np
import pytest

import dlcourse as dl


class NaNBackward(dl.ReLU):
    """A ReLU whose backward puts a NaN in one entry (e.g. a 0/0 in a hand-written backward)."""

    def backward(self, dout):
        dx = super().backward(dout)
        dx[0, 1] = np.nan
        return dx


class InfForward(dl.ReLU):
    """Forward overflows near the input: the finite differences see inf."""

    def forward(self, x):
        return super().forward(x) * 1e308 * 10


class EmptyParam(dl.ReLU):
    """A layer with a parameter of no entries (nothing of it can be compared)."""

    def __init__(self):
        super().__init__()
        self.params["e"] = np.zeros(0)

    def backward(self, dout):
        self.grads["e"] = self.params["e"] * 0
        return super().backward(dout)


@pytest.fixture
def x(to_dev):
    return to_dev(np.random.default_rng(0).standard_normal((3, 4)))


def test_a_correct_layer_still_passes(x):
    assert dl.gradcheck(dl.Linear(4, 2, seed=0), x) < 1e-6


def test_nan_in_the_analytic_gradient_is_an_error(x):
    with pytest.raises(FloatingPointError, match=r"analytic .* gradient of x holds 1 NaN.*\(0, 1\)"):
        dl.gradcheck(NaNBackward(), x, verbose=False)


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning", "ignore:invalid:RuntimeWarning")
def test_inf_in_the_numerical_gradient_is_an_error(x):
    with pytest.raises(FloatingPointError, match="NaN or inf"):
        dl.gradcheck(InfForward(), x, verbose=False)


def test_nan_in_the_input_is_an_error(x):
    x[1, 2] = np.nan
    with pytest.raises(FloatingPointError, match="NaN or inf"):
        dl.gradcheck(dl.Linear(4, 2, seed=0), x, verbose=False)


@pytest.mark.parametrize("max_entries", [0, -1, 2.5, True])
def test_nothing_compared_is_an_error(x, max_entries):
    with pytest.raises(ValueError, match="max_entries"):
        dl.gradcheck(dl.Linear(4, 2, seed=0), x, max_entries=max_entries)


def test_an_empty_input_or_parameter_is_an_error(x, xp):
    with pytest.raises(ValueError, match=r"x has no entries"):
        dl.gradcheck(dl.ReLU(), xp.zeros((0, 4)))
    layer = EmptyParam()
    with pytest.raises(ValueError, match=r"params\['e'\] has no entries"):
        dl.gradcheck(layer, x)


@pytest.mark.parametrize("eps", [0, -1e-6, float("nan"), float("inf"), "1e-6"])
def test_eps_must_be_a_small_positive_number(x, eps):
    with pytest.raises(ValueError, match="eps"):
        dl.gradcheck(dl.Linear(4, 2, seed=0), x, eps=eps)


def test_complex_input_is_an_error(x):
    with pytest.raises(TypeError, match="complex.*imaginary"):
        dl.gradcheck(dl.ReLU(), x + 1j * x)


def test_a_class_instead_of_an_instance_is_an_error(x):
    with pytest.raises(TypeError, match=r"the class ReLU itself.*gradcheck\(ReLU\(...\), x\)"):
        dl.gradcheck(dl.ReLU, x)
