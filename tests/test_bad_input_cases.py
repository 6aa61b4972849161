"""The bad-input findings of issue 48 that the fuzz tests turned up, one case each (cpu):
torch builds nn.Linear(0, 3) and nn.Conv2d(3, 4, 0) (warning that initialising a zero-element
tensor does nothing); load_state_dict refuses a value that is no tensor naming its key; and
x[0] = "a" raises a tensorlite error, not numpy's ValueError, as does every value the tensor
cannot hold (a list of another shape, a ragged one, 1j, 10**400; NaN into an integer tensor)."""
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


@pytest.mark.parametrize("value, error, match", [
    ([1, 2], tl.ShapeError, "src does not broadcast"), (np.ones(2), tl.ShapeError, "src does not broadcast"),
    ([], tl.ShapeError, "src does not broadcast"),
    ([[1], [1, 2]], tl.ShapeError, "cannot assign a list: tensor: cannot make a tensor of list data"),
    ([1, "a"], DTypeError, "cannot assign a list"), (np.array(["a"]), DTypeError, "cannot assign a ndarray"),
    (10 ** 400, tl.ArgumentError, "without overflow"), ([10 ** 400], tl.ArgumentError, "without overflow"),
    (1j, DTypeError, "must be a real number, got complex"), (np.complex64(1), DTypeError, "real number"),
    (None, DTypeError, "None is not a value"), ([None], DTypeError, "None is not a value"),
], ids=["list", "array", "empty-list", "ragged", "mixed", "str-array", "huge", "huge-in-list", "complex", "np-complex",
        "none", "none-in-list"])
def test_assigning_what_the_tensor_cannot_hold_raises_naming_setitem(value, error, match):
    """numpy's ValueError / OverflowError leaked from x[0] = [1, 2], [[1], [1, 2]], 10**400;
    1j was written as its real part with numpy's ComplexWarning, None and [None] as NaN (PyTorch
    refuses all three)."""
    x = tl.zeros(3)
    with pytest.raises(error, match=match) as e:
        x[0] = value
    assert str(e.value).startswith("__setitem__(self: shape="), str(e.value)
    assert x.tolist() == [0.0] * 3
    x[0] = [[5]]  # leading size-1 dims drop, as PyTorch's
    assert x.tolist() == [5.0, 0.0, 0.0]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 10 ** 30], ids=["nan", "inf", "huge"])
def test_an_integer_tensor_refuses_what_int64_cannot_hold(value):
    """x[0] = nan wrote int64's minimum and 10**30 leaked numpy's OverflowError; full() refused
    both already (one check: check_value), as PyTorch does."""
    x = tl.zeros(3, dtype=tl.int64)
    for write in (lambda: x.__setitem__(0, value), lambda: x.fill_(value), lambda: x.__setitem__(slice(None), value)):
        with pytest.raises(tl.ArgumentError, match="cannot be converted to int64 without overflow"):
            write()
    assert x.tolist() == [0, 0, 0]
    x[1:] = [1.5, 2.5]  # floats into an integer tensor truncate, as PyTorch's
    assert x.tolist() == [0, 1, 2]


def test_tensor_refuses_data_no_dtype_holds():
    """tl.tensor(np.array(["a"]), dtype=float32) leaked numpy's ValueError, [10**400] its OverflowError."""
    with pytest.raises(DTypeError, match="tensor: cannot make a float32 tensor of <U1 data"):
        tl.tensor(np.array(["a"]), dtype=tl.float32)
    with pytest.raises(tl.ArgumentError, match="tensor: a value of the list cannot be converted to float32"):
        tl.tensor([10 ** 400], dtype=tl.float32)
    with pytest.raises(DTypeError, match="tensor: cannot make a float32 tensor of complex128 data"):
        tl.tensor([1j], dtype=tl.float32)
    for data in (None, [1.0, None], [[None]]):  # numpy makes None NaN; PyTorch refuses it
        with pytest.raises(DTypeError, match="tensor: None is not a value a float32 tensor can hold"):
            tl.tensor(data, dtype=tl.float32)
    with pytest.raises(DTypeError, match="fill_.*None is not a value"):
        tl.zeros(2).fill_(None)
    assert tl.tensor(np.array([1, 2], dtype=object), dtype=tl.int64).tolist() == [1, 2]  # objects that are numbers
