"""broadcast_parameters / broadcast_optimizer_state / broadcast_object /
allgather_object / SyncBatchNorm on real workers:
`python functions_scenarios.py NAME...` (under ringrun, or alone).

Each scenario prints "<rank>: <name> ok" when its checks pass on this rank.
"""


import copy

import torch
import torch.nn as nn

import ring_strategy.torch as hvd
from scenario_main import run_all
from tests.workers.checks import identical_rows, raises


def flat(tensors):
    return torch.cat([t.detach().reshape(-1).to(torch.float64) for t in tensors])


def identical_everywhere(tensors, what):
    identical_rows(hvd.allgather(flat(tensors).unsqueeze(0)), what)


def divergent_model():
    torch.manual_seed(100 + hvd.rank())
    return nn.Sequential(nn.Linear(5, 7), nn.BatchNorm1d(7), nn.Linear(7, 2))


# ---------------------------------------------------------------- scenarios
def parameters():
    """broadcast_parameters makes divergent replicas identical (state_dict with
    buffers, named_parameters generator, plain list; any root)."""
    n = hvd.size()
    model = divergent_model()
    model[1].running_mean.add_(hvd.rank())
    model[1].num_batches_tracked.add_(hvd.rank() + 3)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    identical_everywhere(model.state_dict().values(), "state_dict")

    model = divergent_model()
    root = n - 1
    want = [p.detach().clone() for p in model.parameters()] if hvd.rank() == root else None
    hvd.broadcast_parameters(model.named_parameters(), root_rank=root)  # a generator, as users pass it
    identical_everywhere(model.parameters(), "named_parameters")
    if want is not None:
        assert all(torch.equal(a, b) for a, b in zip(want, model.parameters()))
    assert all(p.requires_grad for p in model.parameters())

    model = divergent_model()
    hvd.broadcast_parameters(list(model.parameters()), root_rank=0)
    identical_everywhere(model.parameters(), "list")
    for bad in (torch.zeros(2), 3, {"a": 1}):
        raises(ValueError, lambda: hvd.broadcast_parameters(bad, root_rank=0))


def _state_digest(opt):
    sd = opt.state_dict()
    tensors, values = [], []
    for pid in sorted(sd["state"]):
        for key in sorted(sd["state"][pid]):
            v = sd["state"][pid][key]
            (tensors if torch.is_tensor(v) else values).append(v if not torch.is_tensor(v) else v.reshape(-1))
    options = [{k: v for k, v in g.items() if k != "params"} for g in sd["param_groups"]]
    return sd, tensors, values, options


def _train_a_bit(model, opt, steps):
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(4, 5)).pow(2).mean().backward()
        opt.step()


def _plain(x):
    """x with tensors turned into nested lists, for == comparison."""
    if torch.is_tensor(x):
        return ("tensor", str(x.dtype), x.tolist())
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v) for v in x)
    return x


def optimizer_state():
    """broadcast_optimizer_state: state and hyper-parameters become the root's,
    whether the others' state is empty, different, or the root's is empty."""
    r = hvd.rank()
    for make in (
        lambda ps: torch.optim.Adam(ps, lr=0.01 * (r + 1), betas=(0.9, 0.99 - 0.01 * r), weight_decay=0.1 * r),
        lambda ps: torch.optim.SGD(ps, lr=0.1 + r, momentum=0.5 + 0.1 * r, nesterov=r == 0),
        lambda ps: torch.optim.AdamW(ps, lr=0.003 + r),
    ):
        for root_steps, other_steps in ((3, 0), (2, 4), (0, 2)):
            model = divergent_model()
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            opt = make(model.parameters())
            _train_a_bit(model, opt, root_steps if r == 0 else other_steps)
            before = [p.detach().clone() for p in model.state_dict().values()]
            hvd.broadcast_optimizer_state(opt, root_rank=0)
            # No dummy step: parameters and buffers untouched.
            after = list(model.state_dict().values())
            assert all(torch.equal(a, b) for a, b in zip(before, after)), "parameters moved"
            sd, tensors, values, options = _state_digest(opt)
            root_view = hvd.broadcast_object((len(sd["state"]), values, options), root_rank=0)
            assert (len(sd["state"]), values, options) == root_view, ((len(sd["state"]), values, options), root_view)
            if tensors:
                identical_everywhere(tensors, f"{type(opt).__name__} state")
            # With the parameters broadcast too, the replicas then train in lockstep.
            if root_steps:
                model2 = model
                hvd.broadcast_parameters(model2.state_dict(), root_rank=0)
                x = torch.randn(4, 5, generator=torch.Generator().manual_seed(7))
                opt.zero_grad()
                model2(x).pow(2).mean().backward()
                opt.step()
                identical_everywhere(model2.parameters(), "after a step")

    # A DistributedOptimizer over an optimizer that only the root has trained:
    # wrapping keeps that state, the others get it by the broadcast.
    model = divergent_model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    if r == 0:
        _train_a_bit(model, opt, 1)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    assert len(opt.state) == (len(list(model.parameters())) if r == 0 else 0)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    _train_a_bit(model, opt, 2)
    identical_everywhere(list(model.parameters()) + _state_digest(opt)[1], "DistributedOptimizer")

    # LBFGS (nested state: lists of tensors, floats), which Horovod refuses.
    model = divergent_model()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=2 + r, history_size=3)
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(r))

    def closure():
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    for _ in range(1 + r):
        opt.step(closure)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    views = hvd.allgather_object(_plain(opt.state_dict()))
    assert all(v == views[0] for v in views), f"LBFGS state differs: {views}"

    # Mismatched param groups: ValueError on every rank.
    model = divergent_model()
    params = list(model.parameters())
    groups = [{"params": params}] if r == 0 else [{"params": params[:2]}, {"params": params[2:]}]
    opt = torch.optim.SGD(groups, lr=0.1)
    try:
        hvd.broadcast_optimizer_state(opt, root_rank=0)
    except ValueError as e:
        assert hvd.size() > 1 and "differ" in str(e), e
    else:
        assert hvd.size() == 1, "mismatched param groups did not raise"


def fresh_optimizer_state():
    """broadcast_optimizer_state on an optimizer with no state yet, as
    Horovod's: zero gradients afterwards, the state initialised by one step
    on them and equal to the root's; the parameters are left as they were."""
    r = hvd.rank()
    for make in (
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.5),
        lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1),
    ):
        for root_trained in (False, True):
            model = divergent_model()
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            # What Horovod's initialisation gives: one step on zero gradients.
            reference = copy.deepcopy(model)
            ref_opt = make(reference.parameters())
            for p in reference.parameters():
                p.grad = torch.zeros_like(p)
            ref_opt.step()
            opt = make(model.parameters())
            if root_trained and r == 0:
                _train_a_bit(model, opt, 2)
            fresh = not opt.state
            before = [p.detach().clone() for p in model.parameters()]
            assert not fresh or all(p.grad is None for p in model.parameters())
            hvd.broadcast_optimizer_state(opt, root_rank=0)
            name = f"{type(opt).__name__} (root trained: {root_trained})"
            assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())), f"{name}: parameters moved"
            if fresh:
                assert all(p.grad is not None and not p.grad.any() for p in model.parameters()), name
            for p, q in zip(model.parameters(), reference.parameters()):
                assert set(opt.state[p]) == set(ref_opt.state[q]), (name, sorted(opt.state[p]))
                if not root_trained:
                    assert _plain(opt.state[p]) == _plain(ref_opt.state[q]), name
            sd, tensors, values, _ = _state_digest(opt)
            assert (len(sd["state"]), values) == hvd.broadcast_object((len(sd["state"]), values), 0), name
            identical_everywhere(tensors, f"{name} state")
            # The replicas then train in lockstep.
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            opt.zero_grad()
            model(torch.randn(4, 5, generator=torch.Generator().manual_seed(3))).pow(2).mean().backward()
            opt.step()
            identical_everywhere(model.parameters(), f"{name} after a step")

    # Only rank 1's DistributedOptimizer is fresh: its initialising step must
    # run no collective (rank 0 runs none to meet it).
    model = divergent_model()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if r == 0:
        _train_a_bit(model, opt, 1)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert r == 0 or all(p.grad is not None and not p.grad.any() for p in model.parameters())
    identical_everywhere(_state_digest(opt)[1], "DistributedOptimizer state")


def objects():
    """broadcast_object / allgather_object with objects of different types per rank."""
    n, r = hvd.size(), hvd.rank()
    obj = {"epoch": 3, "name": "ckpt", "t": torch.arange(4)} if r == 0 else None
    got = hvd.broadcast_object(obj, root_rank=0)
    assert got["epoch"] == 3 and got["name"] == "ckpt" and torch.equal(got["t"], torch.arange(4)), got
    big = bytes(range(256)) * 4000 if r == n - 1 else [r]
    got = hvd.broadcast_object(big, root_rank=n - 1, name="big")
    assert got == bytes(range(256)) * 4000
    gathered = hvd.allgather_object({"rank": r, "pad": "x" * (r * 1000)} if r % 2 else (r, None))
    assert len(gathered) == n
    for k, item in enumerate(gathered):
        assert item == ({"rank": k, "pad": "x" * (k * 1000)} if k % 2 else (k, None)), (k, item)
    assert hvd.allgather_object(None) == [None] * n


def sync_batch_norm():
    """SyncBatchNorm == BatchNorm on the concatenated global batch: outputs,
    input/weight/bias gradients, running statistics, eval; ranks with
    different batch sizes."""
    n, r = hvd.size(), hvd.rank()
    rows = [5, 3, 4, 2][:n] if n > 1 else [6]
    start = sum(rows[:r])
    mine = slice(start, start + rows[r])
    for shape, momentum, affine in (((2, 4), 0.1, True), ((3, 5, 6), None, True), ((2, 3, 4, 5), 0.3, False)):
        C = shape[1]
        g = torch.Generator().manual_seed(11)
        x_all = torch.randn((sum(rows),) + shape[1:], generator=g, dtype=torch.float64) * 3 + 1
        w_out = torch.randn((sum(rows),) + shape[1:], generator=g, dtype=torch.float64)
        ref = nn.BatchNorm1d(C, momentum=momentum, affine=affine, dtype=torch.float64) if len(shape) < 4 \
            else nn.BatchNorm2d(C, momentum=momentum, affine=affine, dtype=torch.float64)
        sync = hvd.SyncBatchNorm(C, momentum=momentum, affine=affine, dtype=torch.float64)
        if affine:
            with torch.no_grad():
                for layer in (ref, sync):
                    layer.weight.copy_(torch.linspace(0.5, 2.0, C, dtype=torch.float64))
                    layer.bias.copy_(torch.linspace(-1.0, 1.0, C, dtype=torch.float64))
        assert isinstance(sync, nn.modules.batchnorm._BatchNorm)
        for step in range(2):
            xr = x_all.clone().requires_grad_(True)
            yr = ref(xr)
            (yr * w_out).sum().backward()

            x = x_all[mine].clone().requires_grad_(True)
            y = sync(x)
            (y * w_out[mine]).sum().backward()

            assert torch.allclose(y, yr[mine], atol=1e-10), f"{shape}: forward differs"
            assert torch.allclose(x.grad, xr.grad[mine], atol=1e-10), f"{shape}: input gradient differs"
            if affine:
                dw = hvd.allreduce(sync.weight.grad, op=hvd.Sum, name=f"dw.{len(shape)}.{step}")
                db = hvd.allreduce(sync.bias.grad, op=hvd.Sum, name=f"db.{len(shape)}.{step}")
                assert torch.allclose(dw, ref.weight.grad, atol=1e-10), f"{shape}: weight gradient differs"
                assert torch.allclose(db, ref.bias.grad, atol=1e-10), f"{shape}: bias gradient differs"
                for layer in (ref, sync):
                    layer.weight.grad = None
                    layer.bias.grad = None
            assert torch.allclose(sync.running_mean, ref.running_mean, atol=1e-12), f"{shape}: running_mean"
            assert torch.allclose(sync.running_var, ref.running_var, atol=1e-12), f"{shape}: running_var"
            assert int(sync.num_batches_tracked) == int(ref.num_batches_tracked)
        sync.eval()
        ref.eval()
        assert torch.allclose(sync(x_all[mine]), ref(x_all)[mine], atol=1e-12), f"{shape}: eval differs"

    # float32 with a mean far from zero: still within single-precision accuracy.
    x_all = torch.randn(sum(rows), 3, 8, generator=torch.Generator().manual_seed(3)) * 0.1 + 100.0
    ref, sync = nn.BatchNorm1d(3), hvd.SyncBatchNorm(3)
    assert torch.allclose(sync(x_all[mine]), ref(x_all)[mine], atol=1e-3)

    # In a model with DistributedOptimizer: replicas stay identical.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), hvd.SyncBatchNorm(6), nn.ReLU(), nn.Linear(6, 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for step in range(3):
        opt.zero_grad()
        model(torch.randn(rows[r], 4)).pow(2).mean().backward()
        opt.step()
    identical_everywhere(model.state_dict().values(), "SyncBatchNorm model")


SCENARIOS = {f.__name__: f for f in [parameters, optimizer_state, fresh_optimizer_state, objects,
                                      sync_batch_norm]}


if __name__ == "__main__":
    run_all(SCENARIOS)
