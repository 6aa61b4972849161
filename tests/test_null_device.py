"""Host-side bookkeeping of the GPU storage, tested on every machine: a GpuDevice over the
null platform (backends/rocm/null.py: runs nothing, reads zeros, counts device calls).

Here: GpuStorage.value_range, the host-side bound of uploaded ids that lets the index ops
and cross_entropy skip their blocking error-flag read. Its behaviour (bad ids still raise
after every kind of write) is tested on the real devices in test_tensor_errors.py."""
import numpy as np
import pytest

from tensorlite.errors import BackendError, DTypeError
from tensorlite.layout import Layout
from tensorlite.backends.rocm import device as device_module
from tensorlite.backends.rocm.device import GpuDevice
from tensorlite.backends.rocm.null import NullPlatform

C = Layout.contiguous


@pytest.fixture
def dev(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLITE_CACHE_DIR", str(tmp_path))  # the null "code objects" stay out
    return GpuDevice(NullPlatform(), 0)


def test_integer_uploads_carry_their_range(dev, monkeypatch):
    assert dev.from_cpu(np.array([[3, 0], [5, 1]])).value_range == (0, 5)
    assert dev.from_cpu(np.array([7], np.uint8)).value_range == (7, 7)
    assert dev.from_cpu(np.array([0.5, 2.0], np.float32)).value_range is None
    assert dev.from_cpu(np.array([True])).value_range is None
    assert dev.from_cpu(np.zeros(0, np.int64)).value_range is None
    monkeypatch.setattr(device_module, "RANGE_SCAN_LIMIT", 2)   # larger uploads are not scanned
    assert dev.from_cpu(np.array([1, 2, 3])).value_range is None
    assert dev.alloc_uninit((4,), "int64").value_range is None


def _flag_reads(dev, fn):
    before = dev.platform.counts["dtoh"]
    fn()
    return dev.platform.counts["dtoh"] - before


@pytest.mark.parametrize("ids, reads", [([0, 5], 0), ([0, 6], 1), ([-1, 2], 1)])
def test_index_select_reads_the_flag_unless_ids_are_known_in_range(dev, ids, reads):
    weight = dev.from_cpu(np.zeros((6, 4), np.float32))
    st = dev.from_cpu(np.array(ids))
    launches = dev.platform.counts["launch"]
    assert _flag_reads(dev, lambda: weight.index_select(st, C((6, 4)), C((2,)), 0)) == reads
    assert dev.platform.counts["launch"] == launches + 1            # the kernel still checks every id


def test_ids_computed_on_the_device_are_checked(dev):
    weight = dev.from_cpu(np.zeros((6, 4), np.float32))
    ids = dev.from_cpu(np.array([0, 1])).affine(C((2,)), 1.0, 1.0)  # values unknown to the host
    assert ids.value_range is None
    assert _flag_reads(dev, lambda: weight.index_add(C((6, 4)), ids, C((2,)), dev.zeros((2, 4), "float32"),
                                                    C((2, 4)), 0)) == 1


@pytest.mark.parametrize("target, reads", [([0, 2], 0), ([0, 3], 1)])
def test_cross_entropy_reads_the_flag_unless_targets_are_known_in_range(dev, target, reads):
    logits = dev.from_cpu(np.zeros((2, 3), np.float32))
    st = dev.from_cpu(np.array(target))
    assert _flag_reads(dev, lambda: logits.cross_entropy(C((2, 3)), st, C((2,)), None, None, -100)) == reads


def test_writes_keep_a_bound_or_forget_it(dev):
    a = dev.from_cpu(np.array([2, 4, 6]))
    a.const_set(9, Layout((1,), (1,), 1))                   # one element set: the bound widens
    assert a.value_range == (2, 9)
    whole = dev.alloc_uninit((3,), "int64")
    dev.from_cpu(np.array([1, 1, 1])).copy_strided_src(whole, 0, C((3,)))
    assert whole.value_range == (1, 1)                      # fully overwritten: the source's bound
    a.copy_strided_src(whole, 1, Layout((2,), (1,), 1))     # partly overwritten: the union
    assert whole.value_range == (1, 9)
    unknown = dev.from_cpu(np.array([0, 1, 2])).affine(C((3,)), 1.0, 0.0)
    unknown.copy_strided_src(whole, 0, Layout((1,), (1,), 0))
    assert whole.value_range is None                        # part of it now unknown
    b = dev.from_cpu(np.array([0, 1, 2, 3]))
    dev.from_cpu(np.array([7, 8])).copy2d(b, 1, 2, 2, 2, 0, 2)
    assert b.value_range == (0, 8)
    narrow = dev.alloc_uninit((3,), "uint32")
    a.copy_strided_src(narrow, 0, C((3,)))                  # a cast can change values: no bound
    assert narrow.value_range is None
    # results computed on the device have no bound, even where they start as a copy of a bounded storage
    added = a.index_add(C((3,)), dev.from_cpu(np.array([0])), C((1,)), dev.from_cpu(np.array([100])), C((1,)), 0)
    assert added.value_range is None


def test_launch_geometry_checks(dev):
    """launch's fast paths (plain ints, 2-d blocks) and the checks of every other form."""
    kernel = dev.function("binary.hip", "badd_f32")
    launches = dev.platform.counts["launch"]
    for grid, block in ((3, 256), (3, (32, 8)), ((3, 2), (32, 8, 1)), ([2], [64, 2])):
        dev.launch(kernel, grid, block, [])
    assert dev.platform.counts["launch"] == launches + 4
    for grid, block, what in ((0, 256, "grid"), (1, (32, 0), "block"), (1, (True, 0), "block"),
                              ((1, 1, 1, 1), 32, "grid")):
        with pytest.raises(BackendError, match=f"launch: {what}"):
            dev.launch(kernel, grid, block, [])
    assert dev.platform.counts["launch"] == launches + 4


@pytest.mark.parametrize("bad", ["dtype", "size"])
def test_adamw_steps_reject_state_buffers_of_another_dtype_or_size(dev, bad):
    n = 8
    p, g = dev.zeros((n,), "float32"), dev.zeros((n,), "float32")
    m = dev.zeros((n,), "float32")
    v = dev.zeros((n,), "float64") if bad == "dtype" else dev.zeros((n + 1,), "float32")
    launches = dev.platform.counts["launch"]
    with pytest.raises(DTypeError, match=r"adamw_step.*state buffers must be float32 with 8 elements"):
        type(p).adamw_steps([(p, C((n,)), g, C((n,)), m, v, None, 1)], 1e-3, (0.9, 0.999), 1e-8, 0.0)
    assert dev.platform.counts["launch"] == launches


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_training_step_never_waits_for_the_device(tmp_path, monkeypatch, null_backend, dtype):
    """The example GPT's training step (token ids uploaded from the host, cross_entropy,
    backward, AdamW) enqueues everything and reads nothing back: the host runs ahead of
    the GPU. A blocking read per step (an index op's or cross_entropy's error flag, a
    .item()) would show here as a device-to-host copy."""
    import tensorlite as tl
    from tensorlite import backend
    from test_examples import load_example
    monkeypatch.setenv("TENSORLITE_CACHE_DIR", str(tmp_path))
    train_gpt = load_example("train_gpt")
    vocab, seq = 32, 16
    ids = np.random.default_rng(0).integers(0, vocab, (4, seq + 1))
    x, y = tl.tensor(ids[:, :-1], device="null"), tl.tensor(ids[:, 1:].reshape(-1), device="null")
    model = train_gpt.GPT(vocab, seq, 32, 2, 2).to("null")
    model.compute_dtype = getattr(tl, dtype)
    opt = tl.optim.AdamW(model.parameters(), lr=1e-3)
    counts = backend.get_device("null").platform.counts

    def step():
        loss = tl.nn.functional.cross_entropy(model(x).reshape(-1, vocab), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    step()                                   # the first step also makes the optimizer's state
    reads, launches = counts["dtoh"], counts["launch"]
    step()
    assert counts["launch"] > launches and counts["dtoh"] == reads


def test_cat_of_one_row_is_one_launch(null_backend):
    """cat whose pieces are runs of the output (dim 0, or every dim before it of size 1) copies
    float pieces of one dtype in one launch (copy_runs: train_gpt joins q/k/v's weights this
    way each step); along a later dim each piece is a strided copy of its own."""
    import tensorlite as tl
    from tensorlite import backend
    counts = backend.get_device("null").platform.counts
    rows, cols = ([tl.zeros(n, 4, device="null") for n in (2, 3, 5)],
                  [tl.zeros(4, n, device="null") for n in (2, 3, 5)])
    for pieces, dim, launches in ((rows, 0, 1), (cols, 1, 3)):
        before = counts["launch"]
        tl.cat(pieces, dim)
        assert counts["launch"] - before == launches, dim
