"""tl.get_rng_state / tl.set_rng_state and tl.cuda.get_rng_state(_all) / set_rng_state(_all), as
torch's: a generator's state as a 1-D uint8 tensor on `cpu`; setting it back repeats the draws
that followed it. examples/train_gpt.py's checkpoint carries them."""
import numpy as np
import pytest

import tensorlite as tl
from tensorlite.backends.rocm.device import GpuDevice
from tensorlite.backends.rocm.null import NullPlatform
from tensorlite.errors import ArgumentError, DTypeError
from test_examples import load_example


def _draws(device):
    return [tl.rand(5, device=device).tolist(), tl.randn(3, device=device).tolist(),
            tl.rand(2, 3, device=device).tolist()]


def test_setting_a_saved_state_repeats_the_draws_that_followed_it(device):
    tl.manual_seed(4)
    tl.rand(7, device=device)  # somewhere inside the stream, not at its start
    state = tl.get_rng_state(device)
    assert state.dtype is tl.uint8 and state.ndim == 1 and state.device == tl.device("cpu")
    first = _draws(device)
    tl.set_rng_state(state, device)
    assert _draws(device) == first
    assert tl.get_rng_state(device).tolist() != state.tolist()  # drawing moved it on


def test_the_cpu_generator_is_the_default():
    tl.manual_seed(1)
    state = tl.get_rng_state()
    first = tl.randn(4).tolist()
    tl.set_rng_state(state)
    assert tl.randn(4).tolist() == first


def test_a_state_set_before_the_device_is_first_used_is_not_replaced_by_the_global_seed():
    tl.manual_seed(2)
    state = tl.get_rng_state()
    first = tl.rand(3).tolist()
    tl.manual_seed(2)  # devices created later take this seed at their first use ...
    tl.rand(10)
    tl.set_rng_state(state)  # ... but not after set_rng_state
    assert tl.rand(3).tolist() == first


def test_bad_states_raise_naming_the_op():
    with pytest.raises(DTypeError, match="set_rng_state"):
        tl.set_rng_state([1, 2, 3])
    with pytest.raises(DTypeError, match="set_rng_state"):
        tl.set_rng_state(tl.zeros(104))  # float32, not uint8
    with pytest.raises(ArgumentError, match="104 bytes, got 3"):
        tl.set_rng_state(tl.zeros(3, dtype=tl.uint8))


def test_a_gpu_generator_state_is_its_seed_and_offset(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLITE_CACHE_DIR", str(tmp_path))
    dev = GpuDevice(NullPlatform(), 0)  # runs nothing: the state's bookkeeping only
    dev.set_seed(7)
    state = dev.get_rng_state()
    assert np.frombuffer(state, np.uint64).tolist() == [7, 0]
    dev.rand_uniform((4,), tl.float32, 0.0, 1.0)
    dev.rand_normal((4,), tl.float32, 0.0, 1.0)
    assert np.frombuffer(dev.get_rng_state(), np.uint64).tolist() == [7, 2]  # one Philox stream per draw
    dev.set_rng_state(state)
    assert dev.get_rng_state() == state
    with pytest.raises(ArgumentError, match="16 bytes"):
        dev.set_rng_state(b"\0" * 8)


def test_cuda_states_as_torch_cuda_without_a_gpu():
    if tl.cuda.is_available():
        states = tl.cuda.get_rng_state_all()
        assert len(states) == tl.cuda.device_count() and all(s.dtype is tl.uint8 for s in states)
        first = tl.rand(3, device="cuda").tolist()
        tl.cuda.set_rng_state_all(states)
        assert tl.rand(3, device="cuda").tolist() == first
    else:
        assert tl.cuda.get_rng_state_all() == [] and tl.cuda.set_rng_state_all([]) is None


def test_train_gpt_checkpoints_the_generators(tmp_path):
    gpt = load_example("train_gpt")
    path = tmp_path / "run.ckpt"
    assert gpt.main(["--device", "cpu", "--digits", "2", "--steps", "2", "--batch-size", "8", "--d-model", "16",
                     "--layers", "1", "--heads", "2", "--warmup", "1", "--heldout", "10", "--stop-at", "0",
                     "--out", "", "--target", "0", "--checkpoint-every", "1", "--checkpoint", str(path)]) == 0
    rng = tl.load(path)["rng"]
    assert list(rng) == ["cpu"] and rng["cpu"].tolist() == tl.get_rng_state().tolist()
