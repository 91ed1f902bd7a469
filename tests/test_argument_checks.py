"""Every argument of the APIs added after the core layers is checked as the core layers' are
(issue 28, items 7 and 10): the type, the range and finiteness, with an error that names the
argument and the value the user gave, and says what would do."""
import numpy as np
import pytest

import dlcourse as dl


@pytest.mark.parametrize("kwargs, error, words", [
    ({"init_scale": float("inf")}, ValueError, "init_scale=...) must be a finite number"),
    ({"init_scale": 0.0}, ValueError, "init_scale"),
    ({"init_scale": "1"}, TypeError, "init_scale=...) expects a number"),
    ({"growth_interval": "x"}, TypeError, "growth_interval=...) must be a whole number"),
    ({"growth_interval": 2.5}, TypeError, "got 2.5"),
    ({"growth_interval": 0}, ValueError, "growth_interval"),
    ({"growth_factor": 1.0}, ValueError, "growth_factor"),
    ({"backoff_factor": 1.0}, ValueError, "backoff_factor"),
    ({"backoff_factor": float("nan")}, ValueError, "backoff_factor"),
])
def test_loss_scaler_arguments(kwargs, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        dl.LossScaler(**kwargs)


def test_a_valid_loss_scaler_is_as_before():
    s = dl.LossScaler(init_scale=8, growth_interval=np.int64(3))
    assert s.scale == 8.0 and s.growth_interval == 3 and isinstance(s.growth_interval, int)
