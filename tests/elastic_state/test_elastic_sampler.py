"""ElasticSampler in one process: the ranks of a world are samplers built
with ``num_replicas`` and ``rank``; a new world is new samplers loading the
old ones' ``state_dict()``."""

from __future__ import annotations

import collections
from typing import List

import pytest

from ring_strategy.elastic.sampler import ElasticSampler

BATCH = 4


def _world(size: int, n: int = 50, **kwargs) -> List[ElasticSampler]:
    return [ElasticSampler(list(range(n)), num_replicas=size, rank=r, **kwargs) for r in range(size)]


def _train(world: List[ElasticSampler], batches: int, start: int = 0) -> List[int]:
    """Every rank takes batches ``start``, ``start + 1``, ... (``batches`` of
    them, or what is left) and records them; returns the indices trained."""
    trained = []
    for b in range(start, start + batches):
        for sampler in world:
            trained += sampler.get_indices(b, BATCH)
            sampler.record_batch(b, BATCH)
    return trained


def _resize(world: List[ElasticSampler], size: int) -> List[ElasticSampler]:
    """The next world: rank 0's state (every rank holds the same processed indices) on ``size`` new ranks."""
    state = world[0].state_dict()
    assert all(s.processed_indices == state["processed_indices"] for s in world), "ranks disagree"
    new = _world(size, n=len(world[0].dataset), seed=world[0].seed)
    for sampler in new:
        sampler.load_state_dict(state)
    return new


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_one_epoch_covers_every_sample(size):
    world = _world(size)
    lengths = {len(s) for s in world}
    assert lengths == {-(-50 // size)}, lengths  # equal shares: padded by repeating the start
    seen = collections.Counter(i for s in world for i in s)
    assert set(seen) == set(range(50))
    assert sum(seen.values()) == len(world[0]) * size  # the only repeats are the padding
    for r, s in enumerate(world):
        padded = s.remaining_indices + s.remaining_indices[:len(s) * size - 50]
        assert list(s) == padded[r::size]


def test_epochs_shuffle_alike_on_every_rank_and_differently_per_epoch():
    a, b = _world(2), _world(2)
    assert list(a[0]) == list(b[0]) and list(a[1]) == list(b[1])
    first = list(a[0])
    for s in a:
        s.set_epoch(1)
    assert list(a[0]) != first
    assert sorted(list(a[0]) + list(a[1])) == list(range(50))
    plain = ElasticSampler(range(10), shuffle=False, num_replicas=2, rank=1)
    assert list(plain) == [1, 3, 5, 7, 9]


@pytest.mark.parametrize("old,new", [(2, 3), (3, 2), (2, 1), (1, 4)])
def test_a_new_world_trains_the_rest_of_the_epoch(old, new):
    """Issue 18, acceptance 10 (in one process): after a resize mid-epoch
    every sample is trained once in the epoch, apart from padding."""
    world = _world(old, n=48)
    trained = _train(world, 2)
    assert len(set(trained)) == 2 * BATCH * old  # every rank's batches, recorded on every rank
    world = _resize(world, new)
    trained += _train(world, len(world[0]) // BATCH + 1)
    counts = collections.Counter(trained)
    assert set(counts) == set(range(48))
    assert sum(counts.values()) - 48 < new, counts  # at most the new world's padding repeats


def test_a_rollback_retrains_only_the_rolled_back_window():
    world = _world(2, n=48)
    trained = _train(world, 1)
    commit = [s.state_dict() for s in world]
    window = _train(world, 1, start=1)  # trained, then rolled back
    for s, state in zip(world, commit):
        s.load_state_dict(state)
    world = _resize(world, 4)  # 40 left: no padding
    trained += _train(world, len(world[0]) // BATCH + 1)
    assert sorted(trained) == list(range(48))
    assert set(window) <= set(trained[2 * BATCH:])  # trained again after the rollback


def test_state_dict_round_trip():
    s = ElasticSampler(list(range(20)), seed=3, num_replicas=2, rank=0)
    s.set_epoch(5)
    s.record_batch(0, 3)
    state = s.state_dict()
    assert state == {"epoch": 5, "processed_indices": set(s.processed_indices)} and len(state["processed_indices"]) == 6
    other = ElasticSampler(list(range(20)), seed=3, num_replicas=2, rank=0)
    other.load_state_dict(state)
    assert other.epoch == 5 and other.processed_indices == s.processed_indices
    assert list(other) == s.remaining_indices[6:][0::2]
    state["processed_indices"].add(99)
    assert 99 not in other.processed_indices  # a copy, not the caller's set


def test_record_indices_is_local_and_set_epoch_forgets():
    s = ElasticSampler(list(range(10)), num_replicas=2, rank=1)
    s.record_indices([3, 4])
    assert s.processed_indices == {3, 4}
    s.reset()
    assert len(s) == 4 and not {3, 4} & set(s)
    s.set_epoch(1)
    assert s.processed_indices == set() and len(s) == 5


@pytest.mark.parametrize("num_replicas,rank", [(0, 0), (2, 2), (2, -1), ("2", 0)])
def test_a_bad_world_is_a_clear_error(num_replicas, rank):
    with pytest.raises(ValueError, match="rank should be in"):
        ElasticSampler(range(4), num_replicas=num_replicas, rank=rank)


def test_torch_sampler_feeds_a_data_loader():
    torch = pytest.importorskip("torch")
    from ring_strategy.torch.elastic import ElasticSampler as TorchSampler

    s = TorchSampler(list(range(12)), shuffle=False, num_replicas=3, rank=2)
    assert isinstance(s, torch.utils.data.Sampler)
    loader = torch.utils.data.DataLoader(torch.arange(12), batch_size=2, sampler=s)
    assert [b.tolist() for b in loader] == [[2, 5], [8, 11]]
