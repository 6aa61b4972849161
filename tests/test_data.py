"""tensorlite.utils.data against torch.utils.data (where torch is installed): the batches a
DataLoader yields, samplers, collation, random_split, and the errors of bad arguments."""
import numpy as np
import pytest

import tensorlite as tl
from tensorlite.distributed import DistributedSampler
from tensorlite.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, RandomSampler, Subset,
                                   TensorDataset, default_collate, random_split)


class Squares(Dataset):
    """A map-style dataset of mixed samples: (tensor, int, dict with a float and a string)."""

    def __init__(self, n, torch=None):
        self.n, self.torch = n, torch

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        make = self.torch.tensor if self.torch else tl.tensor
        return make([float(i), float(i * i)]), i, {"half": i / 2, "name": f"s{i}"}


def _plain(x):
    """Nested batches as plain Python values, from either framework."""
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


@pytest.mark.parametrize("batch_size, drop_last", [(1, False), (3, False), (3, True), (10, False), (None, False)])
def test_batches_equal_torch_in_order(batch_size, drop_last):
    torch = pytest.importorskip("torch")
    ours = list(DataLoader(Squares(7), batch_size=batch_size, drop_last=drop_last))
    theirs = list(torch.utils.data.DataLoader(Squares(7, torch), batch_size=batch_size, drop_last=drop_last))
    assert _plain(ours) == _plain(theirs)
    assert len(DataLoader(Squares(7), batch_size=batch_size, drop_last=drop_last)) == \
        len(torch.utils.data.DataLoader(Squares(7, torch), batch_size=batch_size, drop_last=drop_last))
    batch = ours[0]
    if batch_size is not None:  # collated: dtypes as torch's default_collate gives them
        assert (batch[0].dtype, batch[1].dtype, batch[2]["half"].dtype) == (tl.float32, tl.int64, tl.float64)


def test_tensor_dataset_batches_on_every_device(device):
    x, y = tl.arange(20.0, device=device).reshape(10, 2), tl.arange(10, device=device)
    batches = list(DataLoader(TensorDataset(x, y), batch_size=4))
    assert [len(b[1]) for b in batches] == [4, 4, 2]
    assert all(b[0].device == x.device and b[1].device == y.device for b in batches)
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in batches]), x.numpy())
    # a custom collate_fn gets the samples themselves
    sizes = list(DataLoader(TensorDataset(x, y), batch_size=4, collate_fn=len))
    assert sizes == [4, 4, 2]


def test_shuffle_draws_a_permutation_per_epoch_seeded_by_manual_seed():
    ds = TensorDataset(tl.arange(50))
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    tl.manual_seed(5)
    epochs = [np.concatenate([b[0].numpy() for b in loader]) for _ in range(2)]
    assert all(sorted(e.tolist()) == list(range(50)) for e in epochs)
    assert not np.array_equal(epochs[0], epochs[1]) and not np.array_equal(epochs[0], np.arange(50))
    tl.manual_seed(5)
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in loader]), epochs[0])


def test_samplers_and_batch_sampler():
    ds = TensorDataset(tl.arange(10))
    order = [9, 0, 3]
    assert [b[0].tolist() for b in DataLoader(ds, sampler=order, batch_size=2)] == [[9, 0], [3]]
    assert [b[0].tolist() for b in DataLoader(ds, batch_sampler=[[1, 2], [7]])] == [[1, 2], [7]]
    assert list(BatchSampler(range(5), 2, drop_last=True)) == [[0, 1], [2, 3]]
    assert len(BatchSampler(range(5), 2, drop_last=False)) == 3 and len(RandomSampler(ds)) == 10
    shard = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=False)
    assert [b[0].tolist() for b in DataLoader(ds, sampler=shard, batch_size=3)] == [[1, 3, 5], [7, 9]]


def test_random_split_as_torch():
    torch = pytest.importorskip("torch")
    ds = TensorDataset(tl.arange(11))
    for lengths in ([3, 8], [0.5, 0.5], [0.3, 0.3, 0.4]):
        parts = random_split(ds, lengths)
        assert [len(p) for p in parts] == [len(p) for p in torch.utils.data.random_split(range(11), lengths)]
        seen = sorted(int(p[i][0].item()) for p in parts for i in range(len(p)))
        assert seen == list(range(11))
    with pytest.raises(ValueError, match="sum of input lengths"):
        random_split(ds, [3, 3])


def test_subset_concat_and_collate():
    a, b = TensorDataset(tl.arange(3)), TensorDataset(tl.arange(10, 12))
    both = a + b
    assert isinstance(both, ConcatDataset) and len(both) == 5
    assert [both[i][0].item() for i in range(5)] == [0, 1, 2, 10, 11] and both[-1][0].item() == 11
    with pytest.raises(IndexError):
        both[5]
    assert [Subset(both, [4, 0])[i][0].item() for i in range(2)] == [11, 0]
    batch = default_collate([(np.ones(2), 1.5, "a"), (np.zeros(2), 2.5, "b")])
    assert batch[0].shape == (2, 2) and batch[1].tolist() == [1.5, 2.5] and batch[2] == ["a", "b"]
    with pytest.raises(tl.DTypeError, match="default_collate"):
        default_collate([object()])


def test_bad_arguments_raise_as_torch():
    ds = TensorDataset(tl.arange(4))
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        DataLoader(ds, sampler=[0, 1], shuffle=True)
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        DataLoader(ds, batch_sampler=[[0]], batch_size=2)
    with pytest.raises(ValueError, match="batch_size should be a positive integer"):
        DataLoader(ds, batch_size=0)
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(ds, num_workers=-1)
    with pytest.raises(tl.ShapeError, match="size mismatch"):
        TensorDataset(tl.arange(3), tl.arange(4))
    assert len(list(DataLoader(ds, batch_size=2, num_workers=2))) == 2  # workers: accepted, loading runs here


def test_random_sampler_with_replacement_and_num_samples():
    """RandomSampler(replacement=True, num_samples=N), as torch's (issue 45: two public programs use it)."""
    tl.manual_seed(0)
    ds = TensorDataset(tl.arange(10))
    drawn = list(RandomSampler(ds, replacement=True, num_samples=200))
    assert len(drawn) == 200 and all(isinstance(i, int) and 0 <= i < 10 for i in drawn)
    assert len(set(drawn)) == 10 and max(drawn.count(i) for i in set(drawn)) > 1  # repeats: not a permutation
    assert len(list(RandomSampler(ds, replacement=True))) == 10
    # without replacement, num_samples beyond the dataset: whole permutations, then part of one
    more = list(RandomSampler(ds, num_samples=25))
    assert len(more) == 25 and sorted(more[:10]) == sorted(more[10:20]) == list(range(10)) and len(set(more[20:])) == 5
    assert len(RandomSampler(ds, num_samples=7)) == 7 and len(list(RandomSampler(ds, num_samples=7))) == 7
    loader = DataLoader(ds, batch_size=8, sampler=RandomSampler(ds, replacement=True, num_samples=20))
    assert [len(b[0]) for b in loader] == [8, 8, 4]
    with pytest.raises(tl.ArgumentError, match="num_samples should be a positive integer value"):
        RandomSampler(ds, num_samples=0)
    with pytest.raises(tl.ArgumentError, match="replacement should be a boolean value"):
        RandomSampler(ds, replacement=1)
