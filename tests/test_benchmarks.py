"""benchmarks/cpu_step.py judges its targets: the verdict that docs/benchmarks.md's CPU figures rest on."""
import pytest


@pytest.fixture
def cpu_step(benchmark_script):
    return benchmark_script("cpu_step")


def test_middle_half_is_the_quartiles_of_the_rounds(cpu_step):
    assert cpu_step.middle_half([1.0, 2.0, 3.0]) == (1.0, 3.0)           # too few: the range
    q1, q3 = cpu_step.middle_half([1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 5.0])
    assert 1.0 < q1 < 1.2 and 1.4 < q3 < 1.6                              # one slow round: no matter


@pytest.mark.parametrize("ratios, verdict", [
    ([1.0, 1.1, 1.2, 1.25, 1.2, 1.1, 1.0, 1.15], "met"),
    ([1.3] * 8, "met"),                                                    # at the target: met
    ([1.0, 1.1, 1.2, 1.25, 1.2, 1.1, 1.0, 9.0], "met"),                    # one busy round
    ([1.35, 1.4, 1.5, 1.45, 1.4, 1.35, 1.6, 1.0], "NOT met"),              # one fast round
    ([1.1, 1.2, 1.4, 1.5, 1.2, 1.1, 1.4, 1.5], "too close to call"),       # spans the target
])
def test_a_target_is_judged_only_when_the_middle_half_of_the_rounds_is_on_one_side(
        cpu_step, ratios, verdict):
    assert cpu_step.verdict(ratios, 1.3).startswith(verdict)
