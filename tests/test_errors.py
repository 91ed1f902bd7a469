"""Bad input gets an error that names what was expected and what was given."""
import numpy as np
import pytest

import dlcourse as dl


def test_linear_wrong_width_suggests_flatten():
    with pytest.raises(ValueError, match=r"Linear\(in_features=64\) got x of shape \(32, 65\).*must be 64"):
        dl.Linear(64, 10).forward(np.zeros((32, 65), np.float32))


def test_linear_wrong_rank_names_flatten():
    with pytest.raises(ValueError, match=r"\(N, in_features\).*\(2, 1, 8, 8\).*Flatten"):
        dl.Linear(64, 10).forward(np.zeros((2, 1, 8, 8), np.float32))


def test_single_sample_without_batch_axis():
    with pytest.raises(ValueError, match=r"x\[None\]"):
        dl.Linear(3, 2).forward(np.zeros(3, np.float32))


def test_integers_into_linear():
    with pytest.raises(TypeError, match=r"floating-point input, got dtype int64.*astype\(np.float32\)"):
        dl.Linear(3, 2).forward(np.zeros((4, 3), dtype=np.int64))


def test_float64_into_float32_model():
    with pytest.raises(TypeError, match=r"float32 parameters but got x of dtype float64"):
        dl.MLP([3, 4, 2]).forward(np.zeros((4, 3)))


def test_conv_wrong_channels_and_rank():
    conv = dl.Conv2d(3, 4, 3)
    with pytest.raises(ValueError, match=r"axis 1 \(channels\) must be 3"):
        conv.forward(np.zeros((2, 1, 8, 8), np.float32))
    with pytest.raises(ValueError, match=r"\(N, C_in, H, W\).*flat images"):
        conv.forward(np.zeros((2, 64), np.float32))


def test_kernel_larger_than_image():
    with pytest.raises(ValueError, match=r"5×5 window does not fit in the 3×3 input"):
        dl.Conv2d(1, 1, 5).forward(np.zeros((1, 1, 3, 3), np.float32))


def test_bad_layer_arguments():
    with pytest.raises(ValueError, match="Dropout probability"):
        dl.Dropout(1.5)
    with pytest.raises(ValueError, match="stride"):
        dl.Conv2d(1, 1, 3, stride=0)
    with pytest.raises(TypeError, match="instead of an instance"):
        dl.Sequential(dl.Linear(2, 2), dl.ReLU)
    with pytest.raises(ValueError, match="activation"):
        dl.MLP([2, 3, 1], activation="swish")
    with pytest.raises(ValueError, match="learning rate"):
        dl.SGD(dl.Linear(2, 2), lr=0)


@pytest.mark.parametrize("make,words", [
    (lambda: dl.Conv2d(1, 4, 0), r"kernel_size >= 1, got Conv2d\(1, 4, kernel_size=0\)"),
    (lambda: dl.Conv2d(0, 4, 3), r"in_channels, out_channels and kernel_size >= 1"),
    (lambda: dl.Conv2d(1, 4, 3, stride=(1, 2)), r"one stride for both height and width"),
    (lambda: dl.MaxPool2d((2, 3)), r"needs a stride.*MaxPool2d\(\(2, 3\), stride=2\)"),
    (lambda: dl.MaxPool2d(2, stride=(2, 1)), r"one stride for both height and width"),
])
def test_conv_and_pool_sizes_say_what_is_wrong(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_a_pair_of_equal_strides_is_that_stride():
    assert dl.Conv2d(1, 2, 3, stride=(2, 2), padding=[1, 1]).get_config()["stride"] == 2
    assert dl.MaxPool2d((2, 2), stride=(2, 2)).stride == 2
    assert dl.MaxPool2d((3, 3)).stride == 3


@pytest.mark.parametrize("labels,words", [
    (np.array([0, 1, 10]), r"labels must be in \[0, 9\].*from 0 to 10"),
    (np.array([0, -1, 2]), r"from -1 to 2"),
    (np.array([0.0, 1.0, 2.0]), r"integer class labels, got dtype float64"),
    (np.array([0, 1]), r"labels of shape \(3,\)"),
    (np.eye(10)[[0, 1, 2]].astype(np.int64), r"argmax\(axis=1\)"),
])
def test_bad_labels(labels, words):
    with pytest.raises((ValueError, TypeError), match=words):
        dl.SoftmaxCrossEntropy().forward(np.zeros((3, 10), np.float32), labels)


def test_loss_backward_before_forward():
    with pytest.raises(RuntimeError, match="forward"):
        dl.SoftmaxCrossEntropy().backward()


def test_step_before_backward():
    model = dl.MLP([2, 3, 2])
    with pytest.raises(RuntimeError, match="backward"):
        dl.SGD(model, lr=0.1).step()


def test_sigmoid_targets_out_of_range():
    with pytest.raises(ValueError, match=r"targets in \[0, 1\].*-1/\+1"):
        dl.SigmoidCrossEntropy().forward(np.zeros(3), np.array([-1, 1, 1]))


def test_perceptron_labels():
    with pytest.raises(ValueError, match="labels 0 and 1"):
        dl.Perceptron(2).fit(np.zeros((3, 2)), np.array([-1, 1, 1]))


@pytest.mark.gpu
def test_gpu_array_into_cpu_model_and_back():
    x = dl.to_device(np.zeros((2, 3), np.float32), "gpu")
    with pytest.raises(ValueError, match=r"parameters are on the cpu but x is on the gpu.*model.to\('gpu'\)"):
        dl.Linear(3, 2).forward(x)
    with pytest.raises(ValueError, match=r"parameters are on the gpu but x is on the cpu"):
        dl.Linear(3, 2).to("gpu").forward(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"logits are on the gpu but labels on the cpu"):
        dl.SoftmaxCrossEntropy().forward(x, np.array([0, 1]))
