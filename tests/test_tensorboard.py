"""tensorlite.utils.tensorboard.SummaryWriter writes TensorBoard event files that TensorBoard's own
reader parses to the same scalars, histograms and text as torch.utils.tensorboard's (issue 45)."""
import numpy as np
import pytest

import tensorlite as tl

pytest.importorskip("tensorboard", reason="the optional tensorboard package is not installed")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from tensorlite.utils.tensorboard import SummaryWriter  # noqa: E402

VALUES = np.random.default_rng(0).standard_normal(1000).astype(np.float32)


def write(writer_class, log_dir, as_tensor):
    with writer_class(str(log_dir)) as w:
        for step in range(5):
            w.add_scalar("train/loss", 1.0 / (step + 1), step)
        w.add_scalar("lr", as_tensor(np.float32(0.25)), 7)
        w.add_histogram("weights", as_tensor(VALUES), 3)
        w.add_histogram("ramp", as_tensor(np.arange(10.0)), 0, bins=4)
        w.add_text("notes", "a *markdown* note", 2)
        w.add_scalars("curves", {"a": 1.0, "b": 2.0}, 1)


def read(log_dir):
    ea = EventAccumulator(str(log_dir), size_guidance={"histograms": 0, "tensors": 0, "scalars": 0})
    ea.Reload()
    scalars = {t: [(e.step, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}
    histos = {}
    for t in ea.Tags()["histograms"]:
        (e,) = ea.Histograms(t)
        h = e.histogram_value
        histos[t] = (e.step, h.min, h.max, h.num, h.sum, h.sum_squares, list(h.bucket_limit), list(h.bucket))
    texts = {t: [(e.step, list(e.tensor_proto.string_val)) for e in ea.Tensors(t)] for t in ea.Tags()["tensors"]}
    runs = sorted(p.name for p in log_dir.iterdir() if p.is_dir())
    return scalars, histos, texts, runs


def test_events_read_back(tmp_path):
    write(SummaryWriter, tmp_path, tl.tensor)
    scalars, histos, texts, runs = read(tmp_path)
    assert scalars["train/loss"] == [(s, pytest.approx(1.0 / (s + 1))) for s in range(5)]
    assert scalars["lr"] == [(7, 0.25)]
    step, lo, hi, num, total, squares, limits, counts = histos["weights"]
    assert (step, num, sum(counts)) == (3, 1000, 1000)
    assert lo == pytest.approx(VALUES.min()) and hi == pytest.approx(VALUES.max())
    assert total == pytest.approx(VALUES.astype(np.float64).sum()) and limits == sorted(limits)
    assert texts == {"notes/text_summary": [(2, [b"a *markdown* note"])]}
    assert runs == ["curves_a", "curves_b"]


def test_same_events_as_torch(tmp_path):
    torch = pytest.importorskip("torch")
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    write(SummaryWriter, tmp_path / "tl", tl.tensor)
    write(tensorboard.SummaryWriter, tmp_path / "torch", torch.tensor)
    ours, theirs = read(tmp_path / "tl"), read(tmp_path / "torch")
    assert ours[0] == theirs[0] and ours[2] == theirs[2] and ours[3] == theirs[3]
    for tag, (*head, limits, counts) in theirs[1].items():
        *our_head, our_limits, our_counts = ours[1][tag]
        assert our_head == pytest.approx(head) and our_counts == counts, tag
        assert our_limits == pytest.approx(limits, rel=1e-12), tag


def test_bad_values_are_refused(tmp_path):
    with SummaryWriter(str(tmp_path)) as w:
        with pytest.raises(tl.ArgumentError, match="one-element tensor, got shape \\(2,\\)"):
            w.add_scalar("x", tl.ones(2))
        with pytest.raises(tl.ArgumentError, match="'h' has nan or inf"):
            w.add_histogram("h", tl.tensor([1.0, float("nan")]))
