"""tl.Generator (issue 45): a generator of one device with its own seed and state, taken by the random
ops, the samplers, DataLoader and random_split through `generator=`, as torch.Generator."""
import pytest

import tensorlite as tl
from tensorlite.utils.data import DataLoader, RandomSampler, TensorDataset, random_split

DRAWS = {
    "rand": lambda g, d: tl.rand(4, generator=g, device=d),
    "randn": lambda g, d: tl.randn(2, 3, generator=g, device=d),
    "randint": lambda g, d: tl.randint(0, 100, (5,), generator=g, device=d),
    "randperm": lambda g, d: tl.randperm(7, generator=g, device=d),
    "multinomial": lambda g, d: tl.tensor([0.2, 0.3, 0.5], device=d).multinomial(4, True, generator=g),
}


@pytest.mark.parametrize("op", DRAWS)
def test_a_seed_gives_the_same_draws_whatever_the_default_generator_does(device, op):
    draw = DRAWS[op]
    g = tl.Generator(device).manual_seed(3)
    first, second = draw(g, device).tolist(), draw(g, device).tolist()
    tl.manual_seed(11)
    tl.rand(9, device=device)  # the device's own generator moves; g's does not
    again = tl.Generator(device).manual_seed(3)
    assert draw(again, device).tolist() == first and draw(again, device).tolist() == second
    assert first != second or op == "multinomial"


def test_the_default_generator_is_untouched(device):
    tl.manual_seed(5)
    want = tl.rand(6, device=device).tolist()
    tl.manual_seed(5)
    tl.rand(100, generator=tl.Generator(device).manual_seed(1), device=device)
    assert tl.rand(6, device=device).tolist() == want


def test_state_round_trip_and_seeds(device):
    g = tl.Generator(device)
    assert g.initial_seed() == 67280421310721 and g.device == tl.device(str(tl.zeros(1, device=device).device))
    assert g.manual_seed(9) is g and g.initial_seed() == 9
    state = g.get_state()
    assert state.dtype == tl.uint8 and state.ndim == 1 and state.device == "cpu"
    a = tl.randn(5, generator=g, device=device).tolist()
    assert g.set_state(state) is g and tl.randn(5, generator=g, device=device).tolist() == a
    s = g.seed()
    assert isinstance(s, int) and g.initial_seed() == s
    with pytest.raises(tl.DTypeError, match="Generator.set_state.*1-D uint8 tensor"):
        g.set_state(tl.zeros(3))
    with pytest.raises(tl.ArgumentError, match="generator must be a tl.Generator"):
        tl.rand(2, generator=5, device=device)


def test_a_generator_of_another_device_is_refused(gpu_device):
    with pytest.raises(tl.DeviceError, match="the generator is on cpu.*give a Generator of the op's device"):
        tl.rand(2, generator=tl.Generator("cpu"), device=gpu_device)


def test_loaders_samplers_and_splits_take_a_generator():
    ds = TensorDataset(tl.arange(20))

    def order(seed):
        loader = DataLoader(ds, batch_size=5, shuffle=True, generator=tl.Generator().manual_seed(seed))
        return [b[0].tolist() for b in loader]
    assert order(1) == order(1) and order(1) != order(2)
    assert sorted(sum(order(1), [])) == list(range(20))
    drawn = [list(RandomSampler(ds, True, 30, generator=tl.Generator().manual_seed(4))) for _ in range(2)]
    assert drawn[0] == drawn[1] and len(drawn[0]) == 30
    parts = [[s.indices for s in random_split(ds, [15, 5], generator=tl.Generator().manual_seed(8))] for _ in range(2)]
    assert parts[0] == parts[1] and sorted(parts[0][0] + parts[0][1]) == list(range(20))


def test_same_api_as_torch():
    torch = pytest.importorskip("torch")
    for name in ("manual_seed", "seed", "initial_seed", "get_state", "set_state", "device"):
        assert hasattr(torch.Generator(), name) and hasattr(tl.Generator(), name)
    assert tl.Generator().initial_seed() == torch.Generator().initial_seed()
