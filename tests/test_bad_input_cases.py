"""The bad-input findings of issue 48 that the fuzz tests turned up, one case each (cpu):
torch builds nn.Linear(0, 3) and nn.Conv2d(3, 4, 0) (warning that initialising a zero-element
tensor does nothing); load_state_dict refuses a value that is no tensor naming its key; and
x[0] = "a" raises a tensorlite error, not numpy's ValueError."""
import numpy as np
import pytest

import tensorlite as tl
from tensorlite import nn
from tensorlite.errors import DTypeError


@pytest.mark.parametrize("build, weight_shape", [(lambda: nn.Linear(0, 3), (3, 0)),
                                                  (lambda: nn.Conv2d(3, 4, 0), (4, 3, 0, 0))],
                         ids=["Linear(0, 3)", "Conv2d(3, 4, 0)"])
def test_modules_without_inputs_build_as_torch_does(build, weight_shape):
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        m = build()
    assert m.weight.shape == weight_shape and m.bias.tolist() == [0.0] * m.bias.shape[0]  # bound 0, as torch


def test_kaiming_init_of_an_empty_tensor_leaves_it():
    t = tl.zeros(0, 5)
    for init in (nn.init.kaiming_uniform_, nn.init.kaiming_normal_):
        with pytest.warns(UserWarning, match="zero-element"):
            assert init(t) is t


def test_load_state_dict_refuses_a_list_naming_the_key():
    m = nn.Linear(2, 3)
    with pytest.raises(DTypeError, match="'weight' is a list in the checkpoint"):
        m.load_state_dict({"weight": [[1.0, 2.0]] * 3, "bias": tl.zeros(3)})
    m.load_state_dict({"weight": np.ones((3, 2), np.float32), "bias": tl.zeros(3)})  # numpy arrays still load
    assert m.weight.tolist() == [[1.0, 1.0]] * 3


@pytest.mark.parametrize("index", [0, slice(None), (tl.tensor([True, False, True]),)], ids=["int", "slice", "mask"])
@pytest.mark.parametrize("value", ["a", ["a", "b", "c"]], ids=["str", "list-of-str"])
def test_assigning_text_raises_a_dtype_error(index, value):
    x = tl.zeros(3)
    with pytest.raises(DTypeError, match=r"__setitem__\(self: shape=\(3,\) float32 cpu\)"):
        x[index] = value
    assert x.tolist() == [0.0] * 3
    x[1:] = [1, 2]  # numbers in a list still write
    assert x.tolist() == [0.0, 1.0, 2.0]


def test_an_empty_tensor_whose_other_sizes_pass_int64_is_a_shape_error():
    """The bad-input fuzz's finding: upsample_nearest2d of an empty batch by 10**20 made a
    (0, 1, 2e20, 2e20) tensor, whose sum leaked numpy's ValueError; zeros(0, 10**20) blamed its
    fill value. numpy refuses such sizes even around a 0 (their product must fit int64)."""
    x = tl.zeros(0, 1, 2, 2, requires_grad=True)
    with pytest.raises(tl.ShapeError, match="upsample_nearest2d: .* other than 0 multiply to more bytes than int64"):
        tl.upsample_nearest2d(x, scale_factor=10 ** 20)
    with pytest.raises(tl.ShapeError, match=r"zeros: .*\(0, 100000000000000000000\) float32"):
        tl.zeros(0, 10 ** 20)
    y = tl.upsample_nearest2d(x, scale_factor=2)  # an empty batch itself is fine
    y.sum().backward()
    assert y.shape == (0, 1, 4, 4) and x.grad.shape == x.shape
