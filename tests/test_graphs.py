"""Graph capture and replay (tensorlite.graphs, backends/rocm/graph.py).

On every GPU device (the emulated AMD platform records launches and replays them, so this
runs in CPU CI): replays recompute the captured work from the static inputs' new values,
what a capture cannot record raises CaptureError and leaves the device usable, a bad id in
a replay raises at the next host read, graphed functions equal their eager calls. On the
null platform: the memory rules (what a graph owns is never handed to eager code) and the
device calls a replay makes."""
import numpy as np
import pytest

import tensorlite as tl
from tensorlite import backend

from conftest import assert_close


def _capture(device, fn):
    g = tl.graphs.Graph()
    with tl.graphs.graph(g, device=device):
        out = fn()
    return g, out


def test_replays_recompute_from_the_static_inputs(gpu_device, rng):
    x = tl.tensor(rng.standard_normal((4, 8)).astype(np.float32), device=gpu_device)
    w = tl.tensor(rng.standard_normal((8, 5)).astype(np.float32), device=gpu_device)
    body = lambda: (x @ w).relu().sum(-1) + tl.tensor([1.0, 2.0, 3.0, 4.0], device=gpu_device)  # noqa: E731
    body()  # warm up: kernels compile outside the capture
    g, out = _capture(gpu_device, body)
    for _ in range(3):
        new = rng.standard_normal((4, 8)).astype(np.float32)
        x.copy_(tl.tensor(new, device=gpu_device))
        g.replay()
        assert_close(out, np.maximum(new @ w.numpy(), 0).sum(-1) + [1, 2, 3, 4], terms=8)


def test_a_constant_uploaded_in_the_capture_is_restored_by_every_replay(gpu_device):
    x = tl.ones(3, device=gpu_device)

    def body():
        c = tl.tensor([1.0, 2.0, 3.0], device=gpu_device)
        c += x          # in place on the constant's tensor: the next replay must start from [1, 2, 3] again
        return c * 2
    body()
    g, out = _capture(gpu_device, body)
    for _ in range(2):
        g.replay()
        assert out.tolist() == [4.0, 6.0, 8.0]


def test_arrival_counters_first_made_in_a_capture_serve_eager_calls(gpu_device, rng, monkeypatch):
    # a long row's sum is cut into chunks whose last block to finish combines them, counting in
    # the device's arrival counters (launch.arrival_counters): made while capturing, they must
    # be at zero for the eager calls after it too, and every launch, replayed or eager, leaves
    # them so
    dev = backend.get_device(gpu_device)
    x = tl.zeros(1 << 16, device=gpu_device)
    x.sum()  # compiles; the counters it made are set aside below
    monkeypatch.setattr(dev, "_tl_arrival_counters", [], raising=False)
    g, out = _capture(gpu_device, x.sum)
    for _ in range(2):  # new data each time: a launch that finished nothing would leave an old sum
        new = rng.standard_normal(1 << 16).astype(np.float32)
        x.copy_(tl.tensor(new, device=gpu_device))
        assert_close(x.sum(), new.astype(np.float64).sum(), terms=1 << 16)
        x.copy_(tl.tensor(new[::-1] * 2, device=gpu_device))
        g.replay()
        assert_close(out, 2 * new.astype(np.float64).sum(), terms=1 << 16)


def test_what_a_capture_cannot_record_raises_and_leaves_the_device_usable(gpu_device):
    x = tl.arange(6.0, device=gpu_device)
    (x * 2).sum()
    for what, body in [("reading", lambda: (x * 2).sum().item()), ("reading", lambda: x[x > 2]),
                       ("random numbers", lambda: tl.randn(3, device=gpu_device)),
                       ("waiting", lambda: tl.synchronize(gpu_device))]:
        with pytest.raises(tl.CaptureError, match=what):
            _capture(gpu_device, body)
        assert not tl.graphs.is_capturing(gpu_device)
        assert (x * 2).sum().item() == 30.0   # eager work runs as before
    g, out = _capture(gpu_device, lambda: x * 3)    # and so does a new capture
    g.replay()
    assert out.tolist() == [0.0, 3.0, 6.0, 9.0, 12.0, 15.0]


def test_an_optimizer_step_inside_a_capture_is_refused(gpu_device):
    p = tl.nn.Parameter(tl.ones(3, device=gpu_device))
    opt = tl.optim.AdamW([p], lr=0.1)
    (p * p).sum().backward()
    with pytest.raises(tl.CaptureError, match="AdamW.step inside a graph capture.*pass capturable=True"):
        _capture(gpu_device, opt.step)
    opt.step()   # eagerly it runs
    assert p.tolist() != [1.0, 1.0, 1.0]
    sgd = tl.optim.SGD([p], lr=0.1)
    with pytest.raises(tl.CaptureError, match="SGD.step inside a graph capture.*outside the captured code"):
        _capture(gpu_device, sgd.step)
    cap = tl.optim.AdamW([p], lr=0.1, capturable=True)
    with pytest.raises(tl.CaptureError, match="state of a parameter.*would be made in the capture.*step once"):
        _capture(gpu_device, cap.step)   # its first step would create the state inside the graph
    assert not cap.state[p] and not tl.graphs.is_capturing(gpu_device)


def _tiny_classifier(device):
    tl.manual_seed(5)
    model = tl.nn.Sequential(tl.nn.Linear(6, 16), tl.nn.GELU(), tl.nn.LayerNorm(16), tl.nn.Linear(16, 3))
    return model.to(device)


def _train(device, batches, graph):
    """AdamW(capturable) with a scheduled Tensor lr and gradient clipping over `batches`: eagerly, or
    (graph) one eager warm-up step, then forward + backward + clip + step captured once and replayed,
    each batch copied into the static inputs. Returns the losses and the final parameters."""
    model = _tiny_classifier(device)
    params = list(model.parameters())
    opt = tl.optim.AdamW(params, lr=tl.tensor(0.02, device=device), weight_decay=0.05, capturable=True)
    sched = tl.optim.lr_scheduler.LambdaLR(opt, lambda e: 1.0 / (1 + e))
    x, y = tl.zeros(8, 6, device=device), tl.zeros(8, dtype=tl.int64, device=device)

    def step():
        loss = tl.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        tl.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
        return loss
    g, losses = None, []
    for i, (xb, yb) in enumerate(batches):
        x.copy_(tl.tensor(xb, device=device))
        y.copy_(tl.tensor(yb, device=device))
        if not graph or i == 0:
            opt.zero_grad()
            loss = step()
        else:
            if g is None:  # gradients None at the capture: backward makes them in the graph's memory
                opt.zero_grad(set_to_none=True)
                g, loss = _capture(device, step)
            elif i % 2:    # a loop that clears the gradients between replays: the graph's stay in place
                opt.zero_grad()
                assert all(p.grad is not None for p in params)
            g.replay()
        sched.step()
        losses.append(loss.item())
    return losses, [p.numpy() for p in params]


def test_a_captured_training_step_replays_like_eager_steps(gpu_device, rng):
    """issue 23: forward, backward, clipping and a capturable AdamW step captured as one graph;
    replays with new batches and a scheduled lr give cpu's eager losses and parameters."""
    batches = [(rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 3, 8)) for _ in range(6)]
    want_losses, want = _train("cpu", batches, graph=False)
    got_losses, got = _train(gpu_device, batches, graph=True)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-4)
    for g, w in zip(got, want):
        assert_close(tl.tensor(g), w, terms=16)


def test_a_capturable_step_is_one_table_launch_per_group_and_dtype(null_backend):
    """The capturable step keeps adamw_many's batching: 30 parameters take two adamw_many_cap
    launches (24 per table) and one increment of the group's step counts (an add and its copy back)."""
    dev = backend.get_device(null_backend)
    params = [tl.nn.Parameter(tl.ones(5 + i, device=null_backend)) for i in range(30)]
    opt = tl.optim.AdamW(params, lr=tl.tensor(0.1, device=null_backend), capturable=True)
    for p in params:
        p.grad = tl.ones(p.shape, device=null_backend)
    opt.step()
    names = []
    launch = dev.launch
    dev.launch = lambda func, *a, **kw: (names.append(func.name), launch(func, *a, **kw))
    try:
        counts = dict(dev.platform.counts)
        opt.step()
        copies = dev.platform.counts["dtod"] - counts.get("dtod", 0)
    finally:
        del dev.launch
    assert sorted(n for n in names if n.startswith("adamw")) == ["adamw_many_cap_f32"] * 2
    assert len(names) + copies <= 4, names


def test_a_bad_id_in_a_replay_raises_at_the_next_host_read(gpu_device, rng):
    table = tl.tensor(rng.standard_normal((5, 3)).astype(np.float32), device=gpu_device)
    ids = tl.tensor([0, 2], device=gpu_device)
    table[ids]
    g, out = _capture(gpu_device, lambda: table.index_select(0, ids) * 2)
    ids.copy_(tl.tensor([4, 1], device=gpu_device))
    g.replay()
    assert_close(out, table.numpy()[[4, 1]] * 2)
    ids.copy_(tl.tensor([7, 1], device=gpu_device))
    g.replay()
    with pytest.raises(tl.IndexOutOfRange, match="replay of a captured graph.*index_select"):
        out.numpy()
    ids.copy_(tl.tensor([3, 3], device=gpu_device))   # reported once; good ids replay cleanly again
    g.replay()
    assert_close(out, table.numpy()[[3, 3]] * 2)


def test_forward_and_backward_replay(gpu_device, rng):
    """A training step's forward and backward captured (the optimizer steps outside): each
    replay's gradients equal an eager backward's on the same batch."""
    model = tl.nn.Sequential(tl.nn.Linear(6, 8), tl.nn.GELU(), tl.nn.Linear(8, 3)).to(gpu_device)
    x = tl.zeros(4, 6, device=gpu_device)
    y = tl.zeros(4, dtype=tl.int64, device=gpu_device)

    def grads():
        for p in model.parameters():
            p.grad = None
        tl.nn.functional.cross_entropy(model(x), y).backward()
        return [p.grad for p in model.parameters()]
    grads()
    g, captured = _capture(gpu_device, grads)
    for _ in range(2):
        xb, yb = rng.standard_normal((4, 6)).astype(np.float32), rng.integers(0, 3, 4)
        x.copy_(tl.tensor(xb, device=gpu_device))
        y.copy_(tl.tensor(yb, device=gpu_device))
        g.replay()
        replayed = [t.numpy() for t in captured]
        for got, want in zip(replayed, grads()):
            assert_close(tl.tensor(got), want.numpy(), terms=8)


@pytest.mark.parametrize("copy_outputs", [True, False])
def test_graphed_functions_equal_their_eager_calls(device, rng, copy_outputs):
    calls = []

    @tl.graphs.graphed(copy_outputs=copy_outputs)
    def step(a, b, scale):
        calls.append(1)
        return {"s": (a * b).sum(0) * scale, "m": a.amax()}

    for shape in [(3, 2), (3, 2), (3, 2), (3, 2), (5, 2), (5, 2), (5, 2)]:
        a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        out = step(tl.tensor(a, device=device), tl.tensor(b, device=device), 0.5)
        assert_close(out["s"], (a * b).sum(0) * 0.5, terms=8)
        assert out["m"].item() == a.max()
    # per shape: a warm-up call and a capture run fn; replays don't (cpu: every call is eager)
    assert len(calls) == (7 if device == "cpu" else 4)


def test_capturing_a_graph_again_replaces_its_work(gpu_device):
    x = tl.arange(4.0, device=gpu_device)
    g = tl.graphs.Graph()
    for scale in (2.0, 3.0, -1.0):
        with tl.graphs.graph(g, device=gpu_device):
            out = x * scale
        g.replay()
        assert out.tolist() == [0.0, scale, 2 * scale, 3 * scale]


def test_graphed_outputs_that_need_grad_are_refused(gpu_device):
    w = tl.nn.Parameter(tl.ones(3, device=gpu_device))
    f = tl.graphs.graphed(lambda x: x * w)
    f(tl.ones(3, device=gpu_device))
    with pytest.raises(tl.CaptureError, match="requires grad"):
        f(tl.ones(3, device=gpu_device))


def test_capture_needs_a_gpu():
    with pytest.raises(tl.DeviceError, match="needs a GPU device"):
        tl.graphs.Graph().capture_begin(device="cpu")


# ---- the null platform: memory and device calls ----------------------------------------

def test_a_replay_repeats_the_device_calls_and_nothing_else(null_backend):
    dev = backend.get_device(null_backend)
    x = tl.ones(64, device=null_backend)
    body = lambda: ((x * 2 + 1).exp() - x).sum()  # noqa: E731
    body()
    counts = dev.platform.counts
    before = dict(counts)
    g, _ = _capture(null_backend, body)
    assert counts["launch"] == before["launch"]   # capturing runs nothing (its error flag is zeroed before)
    before = dict(counts)
    g.replay()
    eager = dict(counts)
    body()
    per_call = {k: counts[k] - eager[k] for k in counts}
    assert {k: eager[k] - before.get(k, 0) for k in eager} == per_call   # one replay = one eager call's work
    assert per_call.get("dtoh", 0) == 0 and per_call["launch"] >= 4


def test_graph_memory_is_never_handed_to_eager_code(null_backend):
    dev = backend.get_device(null_backend)
    x = tl.ones(1000, device=null_backend)
    gone = tl.ones(1000, device=null_backend) * 3     # eager, freed inside the capture
    gone_ptr = gone._storage.buffer.ptr

    def body():
        nonlocal gone
        t = x * 2            # a temporary of the graph, freed inside the capture
        y = t + gone
        gone = None
        return y + 1
    g, out = _capture(null_backend, body)
    graph_ptrs = {out._storage.buffer.ptr}
    eager = [tl.empty(1000, device=null_backend) for _ in range(8)]
    eager_ptrs = {t._storage.buffer.ptr for t in eager}
    assert gone_ptr not in eager_ptrs                # held back: replays still read it
    assert not graph_ptrs & eager_ptrs
    pool_blocks = {p for ptrs in g.pool()._free.values() for p in ptrs}
    assert pool_blocks and not pool_blocks & eager_ptrs  # the graph's freed temporaries stay the graph's
    del eager
    g.reset()
    later = [tl.empty(1000, device=null_backend) for _ in range(8)]
    assert gone_ptr in {t._storage.buffer.ptr for t in later}   # back in the cache once the graph is gone
    assert dev.capture is None


def test_capturing_again_updates_the_executable_when_only_arguments_change(null_backend):
    x = tl.ones(4, device=null_backend)
    g = tl.graphs.Graph()
    with tl.graphs.graph(g, device=null_backend):
        x * 2
    first = g._graph.exec
    with tl.graphs.graph(g, device=null_backend):
        x * 3
    assert g._graph.exec is first            # same work, other arguments: updated in place
    with tl.graphs.graph(g, device=null_backend):
        (x * 2).exp()
    assert g._graph.exec is not first        # other work: instantiated anew


def test_llama_decode_replayed_as_a_graph_equals_cpu(gpu_device, tmp_path):
    """examples/llama.py's generate(): the decode step captured once and replayed, and the
    prompt's step captured on the second call of its length (greedy, and sampling on the
    device), give the cpu's eager tokens."""
    from test_examples import load_example
    llama = load_example("llama")
    llama.write_random_checkpoint(tmp_path, hidden_size=32, layers=1, heads=2, kv_heads=1, vocab_size=64)
    prompt = [[1, 5, 9], [3, 4, 2]]
    want = llama.generate(llama.load(tmp_path), prompt, 6)
    model = llama.load(tmp_path, device=gpu_device)
    np.testing.assert_array_equal(llama.generate(model, prompt, 6, graph=True), want)
    # a second call of the same sizes replays the model's captured step from its first step
    captured = model.decoder.graph
    assert captured is not None
    np.testing.assert_array_equal(llama.generate(model, prompt, 6, graph=True), want)
    assert model.decoder.graph is captured
    # ... and captured the prompt's step, which other prompts of that length replay
    prompt_graph = model.decoder.prompt_graph
    assert prompt_graph is not None
    other = [[7, 7, 1], [2, 8, 6]]
    np.testing.assert_array_equal(llama.generate(model, other, 6, graph=True),
                                  llama.generate(llama.load(tmp_path), other, 6))
    assert model.decoder.prompt_graph is prompt_graph
    # other sizes: a new decoder, captured anew
    np.testing.assert_array_equal(llama.generate(model, prompt, 4, graph=True), want[:, :4])
    assert model.decoder.graph is not captured
    sampled = [llama.generate(model, prompt, 6, temperature=1.0, top_k=5, seed=3, graph=True) for _ in range(2)]
    np.testing.assert_array_equal(*sampled)   # the device generator, seeded: the same tokens again
    # a prompt of more rows than the decode attention takes: flash attention under the cache's
    # mask, run eagerly, then captured, then replayed
    long = np.arange(40).reshape(2, 20) * 7 % 64
    want_long = llama.generate(llama.load(tmp_path), long, 3)
    for _ in range(3):
        np.testing.assert_array_equal(llama.generate(model, long, 3, graph=True), want_long)
    assert model.decoder.prompt_graph is not None


def test_out_of_memory_while_capturing_keeps_the_graphs_blocks(null_backend, monkeypatch):
    """Out of memory in a capture raises at once: the usual retry (give the cache back, which
    waits for the stream) would wait inside the capture and free blocks the graph reads."""
    dev = backend.get_device(null_backend)
    x = tl.ones(1000, device=null_backend)
    (x * 2).sum()
    cached = {size: list(ptrs) for size, ptrs in dev.allocator._free.items()}
    assert cached
    waits = []
    monkeypatch.setattr(dev.platform, "stream_synchronize", lambda s: waits.append(s))

    def no_memory(nbytes):
        raise tl.OutOfMemoryError("null: out of memory (simulated)")

    def body():  # the device runs out once the capture has begun
        monkeypatch.setattr(dev.platform, "malloc", no_memory)
        return tl.empty(1 << 24, device=null_backend) + 1
    with pytest.raises(tl.OutOfMemoryError, match="out of memory allocating"):
        _capture(null_backend, body)
    assert not waits and dev.capture is None
    assert all(set(ptrs) <= set(dev.allocator._free.get(size, ())) for size, ptrs in cached.items())


def test_train_gpt_graphed_training_equals_eager(gpu_device):
    """examples/train_gpt.py --graph (two eager steps, then the captured step replayed) trains the
    model the eager run trains: the same losses and weights after the replays."""
    from test_examples import load_example
    gpt = load_example("train_gpt")
    runs = {}
    for graph in (False, True):
        args = gpt.parse_args(["--device", gpu_device, "--digits", "1", "--steps", "5", "--batch-size", "8",
                               "--d-model", "16", "--layers", "1", "--heads", "2", "--warmup", "2", "--heldout", "10",
                               "--stop-at", "0", "--graph" if graph else "--no-graph"])
        model, _, losses = gpt.train(args)
        runs[graph] = losses, {k: v.numpy() for k, v in model.state_dict().items()}
    (eager_losses, eager), (graph_losses, graphed) = runs[False], runs[True]
    assert [s for s, _ in graph_losses] == [0, 4]     # step 4 is a replay (steps 2-4 are)
    np.testing.assert_allclose([v for _, v in graph_losses], [v for _, v in eager_losses], rtol=1e-4)
    for name, want in eager.items():
        if name.endswith(".k.bias"):  # its gradient is 0 (softmax ignores a shift of every key): Adam moves it by
            continue                  # about lr on whatever rounding noise a kernel's memory alignment gives
        assert_close(tl.tensor(graphed[name]), want, terms=16)
