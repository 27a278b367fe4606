"""Process sets in ring_strategy.torch on 4 ranks, started with
``hvd.init(process_sets=[[0], [1, 2], [0, 1, 2], [1, 3]])``:
``python torch_process_sets.py SCENARIO...``. Each scenario prints
``<rank>: <scenario> ok`` (tests/workers/checks.py)."""

from __future__ import annotations

import sys
from typing import List

import torch
import torch.nn.functional as F

import ring_strategy.torch as hvd
from tests.workers.checks import close, equal, raises, run_scenarios

SETS = [[0], [1, 2], [0, 1, 2], [1, 3]]
ME = 0
PS: List[hvd.ProcessSet] = []


def mine() -> List[hvd.ProcessSet]:
    return [ps for ps in PS if ps.included()]


def ops() -> None:
    """Sync, async, in-place and grouped forms of every collective on each set."""
    for ps in mine():
        ranks, k = ps.ranks, ps.size()
        x = torch.arange(4, dtype=torch.float32) + ME
        total = sum(torch.arange(4, dtype=torch.float32) + r for r in ranks)
        equal(hvd.allreduce(x, op=hvd.Sum, process_set=ps), total, "allreduce")
        close(hvd.synchronize(hvd.allreduce_async(x, process_set=ps)), total / k, "average")
        y = x.clone()
        hvd.allreduce_(y, op=hvd.Sum, process_set=ps)
        equal(y, total, "allreduce_")
        for got in hvd.grouped_allreduce([x, 2 * x], op=hvd.Sum, process_set=ps):
            assert got.shape == (4,)
        equal(hvd.allgather(torch.full((ME + 1,), ME), process_set=ps),
              torch.cat([torch.full((r + 1,), r) for r in ranks]), "allgather")
        for got in hvd.grouped_allgather([torch.tensor([ME]), torch.tensor([[ME, ME]])], process_set=ps):
            assert got.shape[0] == k
        root = ranks[-1]
        equal(hvd.broadcast(torch.full((2,), ME), root, process_set=ps), torch.full((2,), root), "broadcast")
        z = torch.full((2,), ME)
        hvd.broadcast_(z, root, process_set=ps)
        equal(z, torch.full((2,), root), "broadcast_")
        out, received = hvd.alltoall(torch.arange(k) + 100 * ME, splits=[1] * k, process_set=ps)
        equal(out, torch.tensor([100 * r + ps.rank() for r in ranks]), "alltoall")
        equal(hvd.reducescatter(torch.ones(k, 2), op=hvd.Sum, process_set=ps), torch.full((1, 2), float(k)), "rs")
        for got in hvd.grouped_reducescatter([torch.ones(k, 1), torch.ones(2 * k)], op=hvd.Sum, process_set=ps):
            assert (got == k).all()
        hvd.barrier(process_set=ps)
        assert hvd.allgather_object(ME, process_set=ps) == ranks
        assert hvd.broadcast_object({"r": ME}, root_rank=root, process_set=ps) == {"r": root}


def in_flight_together() -> None:
    """The same name on every set of this rank and the global set at once."""
    handles = [(hvd.allreduce_async(torch.full((3,), ME + 1.0), op=hvd.Sum, name="g", process_set=ps),
                float(sum(r + 1 for r in ps.ranks))) for ps in [hvd.global_process_set] + mine()]
    for h, want in reversed(handles):
        equal(hvd.synchronize(h), torch.full((3,), want), "together")


def autograd() -> None:
    """Gradients flow through collectives on a set."""
    for ps in mine():
        x = torch.ones(3, requires_grad=True)
        hvd.allgather(x, process_set=ps).sum().backward()
        equal(x.grad, torch.ones(3), "allgather grad")
        x = torch.ones(3, requires_grad=True)
        hvd.broadcast(x, ps.ranks[0], process_set=ps).sum().backward()
        equal(x.grad, torch.ones(3) if ME == ps.ranks[0] else torch.zeros(3), "broadcast grad")
        x = torch.ones(3, requires_grad=True)
        hvd.allreduce(x, op=hvd.Sum, process_set=ps).sum().backward()
        equal(x.grad, torch.full((3,), float(ps.size())), "allreduce grad")


def _batch(rank: int):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(8, 5, generator=g), torch.randn(8, 2, generator=g)


def optimizer() -> None:
    """DistributedOptimizer(process_set=[1, 2]) equals one process on the
    pair's batches; ranks outside the set train alone."""
    ps = PS[1]
    torch.manual_seed(0)
    model, ref = torch.nn.Linear(5, 2), torch.nn.Linear(5, 2)
    ref.load_state_dict(model.state_dict())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), process_set=ps)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    team = ps.ranks if ps.included() else [ME]
    for _ in range(3):
        x, y = _batch(ME)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        ref_opt.zero_grad()
        (sum(F.mse_loss(ref(_batch(r)[0]), _batch(r)[1]) for r in team) / len(team)).backward()
        ref_opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        close(p, q, "trained", rtol=1e-5)


def sync_batch_norm() -> None:
    """SyncBatchNorm(process_set=[0, 1, 2]) normalizes over the set's batches."""
    ps = PS[2]
    if not ps.included():
        return
    bn = hvd.SyncBatchNorm(3, process_set=ps)
    ref = torch.nn.BatchNorm1d(3)
    out = bn(_batch(ME)[0][:, :3])
    whole = torch.cat([_batch(r)[0][:, :3] for r in ps.ranks])
    close(out, ref(whole)[8 * ps.rank():8 * ps.rank() + 8], "normalized", rtol=1e-4, atol=1e-5)
    close(bn.running_mean, ref.running_mean, "running mean", rtol=1e-4, atol=1e-6)


def errors() -> None:
    x = torch.ones(2)
    for ps in PS:
        if not ps.included():
            raises(hvd.BadArgumentError, lambda: hvd.allreduce(x, process_set=ps), "not a member")
            raises(hvd.BadArgumentError, lambda: hvd.broadcast_object(1, process_set=ps), "not a member")
    raises(hvd.BadArgumentError, lambda: hvd.add_process_set([0, 3]), "dynamic process sets")
    raises(hvd.BadArgumentError, lambda: hvd.remove_process_set(hvd.global_process_set), "cannot be removed")


SCENARIOS = {f.__name__: f for f in [ops, in_flight_together, autograd, optimizer, sync_batch_norm, errors]}


def main() -> None:
    global ME
    PS.extend(hvd.ProcessSet(s) for s in SETS)
    hvd.init(process_sets=PS)  # registers them: ids 1..4
    ME = hvd.rank()
    run_scenarios(SCENARIOS, sys.argv[1:], ME, after_each=hvd.barrier, stop_at_failure=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
