"""DistributedOptimizer scenarios on real workers: `python optimizer_scenarios.py NAME...`
(under ringrun, or alone for a world of one).

Each scenario prints "<rank>: <name> ok" when its checks pass on this rank.
Training scenarios compare the distributed run with a single-process run of
the same model on the concatenated global batch, computed inside every rank.
"""

import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import ring_strategy.torch as hvd
import ring_strategy.torch.grad_sync as grad_sync
from ring_strategy._schedule import forced
from scenario_main import run_all
from tests.workers.checks import identical_rows, raises

TOL = 1e-5
STEPS = 4
B = 4  # rows per rank per backward pass
IN, OUT = 6, 3


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, 8), nn.Tanh(), nn.Linear(8, OUT))


def global_data(rows):
    g = torch.Generator().manual_seed(1234)
    return torch.randn(STEPS, rows, IN, generator=g), torch.randn(STEPS, rows, OUT, generator=g)


def make_sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)


def max_diff(a, b):
    return max((x.detach() - y.detach()).abs().max().item() for x, y in zip(a.parameters(), b.parameters()))


def reference(passes=1, loss_scale=1.0):
    """A single process trained on every rank's rows at once."""
    n = hvd.size()
    model = make_model()
    opt = make_sgd(model)
    xs, ys = global_data(n * B * passes)
    for s in range(STEPS):
        opt.zero_grad()
        (F.mse_loss(model(xs[s]), ys[s]) * loss_scale).backward()
        opt.step()
    return model


def train(passes=1, zero_grad=lambda opt: opt.zero_grad(), make_groups=None, **kwargs):
    """The distributed run: each rank takes its rows of every global batch."""
    n, r = hvd.size(), hvd.rank()
    model = make_model()
    if make_groups is not None:
        kwargs["groups"] = make_groups(list(model.parameters()))
    opt = hvd.DistributedOptimizer(make_sgd(model), named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes, **kwargs)
    xs, ys = global_data(n * B * passes)
    for s in range(STEPS):
        zero_grad(opt)
        for m in range(passes):
            rows = slice((r * passes + m) * B, (r * passes + m + 1) * B)
            (F.mse_loss(model(xs[s, rows]), ys[s, rows]) / passes).backward()
        opt.step()
    return model, opt


def flat_parameters(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check_close(model, ref, tol=TOL, what=""):
    d = max_diff(model, ref)
    assert d < tol, f"{what}: max parameter difference {d:g} >= {tol:g}"


# ---------------------------------------------------------------- scenarios
def equivalence():
    """2 workers with DistributedOptimizer == 1 process on the global batch."""
    model, opt = train()
    check_close(model, reference(), what="equivalence")
    assert isinstance(opt, torch.optim.SGD) and type(opt).__name__ == "SGD"
    # Replicas bit-identical.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    identical_rows(hvd.allgather(flat.unsqueeze(0)))


def overlap():
    """With the overlap schedule, allreduces start during backward: when the last
    layer's gradient is submitted, the first layer's gradient has not been computed yet."""
    model = make_model()
    with forced("overlap"):
        opt = hvd.DistributedOptimizer(make_sgd(model), named_parameters=model.named_parameters())
    first_weight = model[0].weight
    seen = []
    real = grad_sync.allreduce_async_

    def spy(tensor, *args, **kwargs):
        seen.append((kwargs.get("name"), first_weight.grad is None))
        return real(tensor, *args, **kwargs)

    grad_sync.allreduce_async_ = spy
    try:
        opt.zero_grad()
        F.mse_loss(model(torch.randn(B, IN)), torch.randn(B, OUT)).backward()
        if hvd.size() > 1:
            assert len(opt._sync.handles) == 4 and all(f is not None for f in opt._sync.handles.values()), opt._sync.handles
            assert seen and seen[0][1], f"no allreduce submitted before backward reached the first layer: {seen}"
        else:
            assert not seen and not opt._sync.handles
        opt.step()
    finally:
        grad_sync.allreduce_async_ = real


def after_backward():
    """With the after_backward schedule nothing is sent during backward; step()
    submits one grouped allreduce; the result is bitwise the overlap schedule's."""
    model = make_model()
    with forced("after_backward"):
        opt = hvd.DistributedOptimizer(make_sgd(model), named_parameters=model.named_parameters())
    real, seen = grad_sync.grouped_allreduce_async_, []

    def spy(tensors, *args, **kwargs):
        seen.append(len(tensors))
        return real(tensors, *args, **kwargs)

    grad_sync.grouped_allreduce_async_ = spy
    try:
        opt.zero_grad()
        F.mse_loss(model(torch.randn(B, IN)), torch.randn(B, OUT)).backward()
        if hvd.size() > 1:
            assert len(opt._sync.handles) == 4 and all(f is None for f in opt._sync.handles.values()), opt._sync.handles
            assert not seen
        opt.step()
        assert seen == ([4] if hvd.size() > 1 else []), seen
    finally:
        grad_sync.grouped_allreduce_async_ = real
    runs = {}
    for name in ("overlap", "after_backward"):
        with forced(name):
            runs[name], _ = train(passes=2)
    assert torch.equal(flat_parameters(runs["overlap"]), flat_parameters(runs["after_backward"]))
    check_close(runs["after_backward"], reference(passes=2), what="after_backward")


def passes2():
    """backward_passes_per_step=2 == 1 process on the global batch of 2 passes;
    nothing is sent before the last pass."""
    check_close(train(passes=2)[0], reference(passes=2), what="passes2")
    model = make_model()
    with forced("overlap"):  # the reductions then start with the last pass
        opt = hvd.DistributedOptimizer(make_sgd(model), named_parameters=model.named_parameters(),
                                       backward_passes_per_step=2)
    x, y = torch.randn(B, IN), torch.randn(B, OUT)
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    if hvd.size() > 1:
        assert opt._sync.handles and all(f is None for f in opt._sync.handles.values()), "sent before the last pass"
        raises(AssertionError, opt.zero_grad, "zero_grad")  # between accumulation passes
    F.mse_loss(model(x), y).backward()
    if hvd.size() > 1:
        assert all(f is not None for f in opt._sync.handles.values())
        # A third pass before step(), on different data on every rank.
        raises(AssertionError, lambda: F.mse_loss(model(x + hvd.rank()), y).backward(), "backward_passes_per_step")
        # It raised before autograd accumulated into .grad (which the second
        # pass's reduction may still be reading or writing): the gradients
        # are the average of the two passes (the data is the same on every
        # rank), nothing of the third.
        opt.synchronize()
        ref = make_model()
        for _ in range(2):
            F.mse_loss(ref(x), y).backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            assert torch.allclose(p.grad, q.grad, atol=1e-6), "the failed pass changed .grad"
        with opt.skip_synchronize():
            opt.step()
    else:
        opt.step()
    # step() after fewer passes than backward_passes_per_step still averages.
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    opt.step()
    assert not opt._sync.handles


def predivide():
    """gradient_predivide_factor keeps the average; op=Sum gives size x the average."""
    check_close(train(gradient_predivide_factor=4.0)[0], reference(), what="predivide")
    check_close(train(op=hvd.Sum)[0], reference(loss_scale=hvd.size()), what="op=Sum")
    raises(ValueError, lambda: hvd.DistributedOptimizer(make_sgd(make_model()), op=hvd.Sum, gradient_predivide_factor=2.0),
           "gradient_predivide_factor")


def groups():
    """groups=int and groups=list fuse gradients and keep the result."""
    model, opt = train(groups=2)
    check_close(model, reference(), what="groups=2")
    assert len(opt._sync.groups) == 2, opt._sync.groups
    model = make_model()
    params = list(model.parameters())
    opt = hvd.DistributedOptimizer(make_sgd(model), named_parameters=model.named_parameters(),
                                   groups=[[params[0], params[3]]])
    assert sorted(len(g) for g in opt._sync.groups) == [1, 1, 2], opt._sync.groups
    del opt
    check_close(train(make_groups=lambda ps: [[ps[0], ps[3]]])[0], reference(), what="groups=list")
    for bad in (0, -1, "2", [[torch.zeros(2)]]):
        raises(ValueError, lambda: hvd.DistributedOptimizer(make_sgd(make_model()), groups=bad))


def zero_grad_variants():
    """zero_grad(set_to_none=True/False) train correctly; in flight it raises."""
    ref = reference()
    for set_to_none in (True, False):
        model, opt = train(zero_grad=lambda o: o.zero_grad(set_to_none=set_to_none))
        check_close(model, ref, what=f"set_to_none={set_to_none}")
        opt.zero_grad(set_to_none=set_to_none)
        grads = [p.grad for p in model.parameters()]
        if set_to_none:
            assert all(g is None for g in grads)
        else:
            assert all(g is not None and not g.any() for g in grads)
    model = make_model()
    opt = hvd.DistributedOptimizer(make_sgd(model), named_parameters=model.named_parameters())
    F.mse_loss(model(torch.randn(B, IN)), torch.randn(B, OUT)).backward()
    if hvd.size() > 1:
        raises(AssertionError, opt.zero_grad, "before optimizer.step()")  # allreduces in flight
    opt.step()  # still consistent after the refused zero_grad
    opt.zero_grad()


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Linear(IN, OUT)
        self.rank1_only = nn.Parameter(torch.ones(OUT))
        self.never = nn.Parameter(torch.ones(OUT))

    def forward(self, x, use_extra):
        y = self.body(x)
        return y * self.rank1_only if use_extra else y


def unused_parameters():
    """A parameter used on one rank only is averaged with zeros from the
    others; one unused everywhere does not hang."""
    n, r = hvd.size(), hvd.rank()
    model = Branchy()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for _ in range(2):
        opt.zero_grad()
        x = torch.full((B, IN), 1.0)
        model(x, use_extra=(r == n - 1)).sum().backward()
        opt.synchronize()
        with torch.no_grad():
            y = model.body(x).sum(0)
        # Only the last rank computes d/d(rank1_only) = sum of body(x) rows.
        want = y / n
        got = model.rank1_only.grad
        assert got is not None and torch.allclose(got, want, atol=1e-5), (got, want)
        assert model.never.grad is None or not model.never.grad.any()
        with opt.skip_synchronize():
            opt.step()


def sparse():
    """Sparse embedding gradients, allgathered or as dense, equal the dense average."""
    n, r = hvd.size(), hvd.rank()
    idx = [torch.tensor([0, 3, 3, 7]), torch.tensor([1, 3, 9]), torch.tensor([2]), torch.tensor([5, 5])]
    for as_dense in (False, True):
        torch.manual_seed(0)
        emb = nn.Embedding(10, 3, sparse=True)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.1),
                                       named_parameters=emb.named_parameters(), sparse_as_dense=as_dense)
        opt.zero_grad()
        emb(idx[r % len(idx)]).pow(2).sum().backward()
        opt.synchronize()
        got = emb.weight.grad
        assert got.is_sparse, "the gradient should stay sparse"
        torch.manual_seed(0)
        ref = nn.Embedding(10, 3)
        ref.weight.grad = None
        for k in range(n):
            ref(idx[k % len(idx)]).pow(2).sum().backward()
        want = ref.weight.grad / n
        assert torch.allclose(got.to_dense(), want, atol=1e-6), (as_dense, got.to_dense(), want)
        with opt.skip_synchronize():
            opt.step()


def compression():
    """fp16 / bf16 compression: close to the exact run."""
    ref = reference()
    check_close(train(compression=hvd.Compression.fp16)[0], ref, tol=2e-3, what="fp16")
    check_close(train(compression=hvd.Compression.bf16)[0], ref, tol=2e-2, what="bf16")


def clipping_and_state():
    """synchronize() + skip_synchronize(); the warning without it; state_dict round trip."""
    model = make_model()
    opt = hvd.DistributedOptimizer(make_sgd(model), named_parameters=model.named_parameters())
    F.mse_loss(model(torch.randn(B, IN)), torch.randn(B, OUT)).backward()
    opt.synchronize()
    nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with opt.skip_synchronize():
            opt.step()
    opt.zero_grad()
    F.mse_loss(model(torch.randn(B, IN)), torch.randn(B, OUT)).backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt.step()
    assert any("skip_synchronize" in str(w.message) for w in caught), [str(w.message) for w in caught]
    state = opt.state_dict()
    assert len(state["state"]) == 4 and state["param_groups"][0]["lr"] == 0.1
    opt.load_state_dict(state)
    # Step hooks run once per step.
    calls = []
    opt.register_step_pre_hook(lambda *a: calls.append(1))
    opt.zero_grad()
    F.mse_loss(model(torch.randn(B, IN)), torch.randn(B, OUT)).backward()
    opt.step()
    assert calls == [1], calls
    # An LR scheduler drives the wrapped optimizer.
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    opt.zero_grad()
    F.mse_loss(model(torch.randn(B, IN)), torch.randn(B, OUT)).backward()
    opt.step()
    sched.step()
    assert abs(opt.param_groups[0]["lr"] - 0.05) < 1e-12


def closure():
    """step(closure) averages the gradients the closure computes (LBFGS)."""
    n, r = hvd.size(), hvd.rank()
    xs, ys = global_data(n * B)

    def run(model, opt, rows):
        def closure():
            opt.zero_grad()
            loss = F.mse_loss(model(xs[0, rows]), ys[0, rows])
            loss.backward()
            return loss

        for _ in range(2):
            opt.step(closure)

    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3),
                                   named_parameters=model.named_parameters())
    run(model, opt, slice(r * B, (r + 1) * B))
    ref = make_model()
    run(ref, torch.optim.LBFGS(ref.parameters(), lr=0.5, max_iter=3), slice(0, n * B))
    check_close(model, ref, tol=1e-4, what="LBFGS closure")


def late_parameters():
    """A param group added after wrapping, and a layer unfrozen after wrapping,
    are averaged too."""
    ref = reference()
    n, r = hvd.size(), hvd.rank()
    xs, ys = global_data(n * B)
    for how in ("add_param_group", "unfreeze"):
        model = make_model()
        if how == "add_param_group":
            base = torch.optim.SGD(model[0].parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
        else:
            for p in model[2].parameters():
                p.requires_grad_(False)
            base = make_sgd(model)
        opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters()
                                       if how == "unfreeze" else model[0].named_parameters())
        if how == "add_param_group":
            opt.add_param_group({"params": list(model[2].parameters())})
        else:
            for p in model[2].parameters():
                p.requires_grad_(True)
        for s in range(STEPS):
            opt.zero_grad()
            rows = slice(r * B, (r + 1) * B)
            F.mse_loss(model(xs[s, rows]), ys[s, rows]).backward()
            opt.step()
        check_close(model, ref, what=how)


def validation():
    """Bad arguments raise ValueError / NotImplementedError before any communication."""
    model = make_model()
    named = list(model.named_parameters())
    cases = [
        (lambda: hvd.DistributedOptimizer(make_sgd(model), named_parameters=[named[0], ("0.weight", named[1][1])] + named[2:]),
         ValueError, "duplicates"),
        (lambda: hvd.DistributedOptimizer(make_sgd(model), named_parameters=named[1:]), ValueError, "not named"),
        (lambda: hvd.DistributedOptimizer(make_sgd(model), named_parameters=[p for _, p in named]), ValueError, "tuples"),
        (lambda: hvd.DistributedOptimizer(make_sgd(model), backward_passes_per_step=0), ValueError, "positive"),
        (lambda: hvd.DistributedOptimizer(make_sgd(model), op=hvd.Adasum, gradient_predivide_factor=2.0), ValueError,
         "op != Average"),
        (lambda: hvd.DistributedOptimizer(hvd.DistributedOptimizer(make_sgd(model))), ValueError, "already"),
        (lambda: hvd.DistributedOptimizer(make_sgd(model), gradient_predivide_factor=0.0), ValueError, "positive"),
    ]
    for call, exc, text in cases:
        raises(exc, call, text)
    # Extra named tensors that the optimizer does not update are fine (as in Horovod).
    hvd.DistributedOptimizer(torch.optim.SGD(model[2].parameters(), lr=0.1), named_parameters=named)
    # Generated names are unique across param groups.
    opt = hvd.DistributedOptimizer(torch.optim.SGD([{"params": model[0].parameters()},
                                                    {"params": model[2].parameters(), "lr": 0.2}], lr=0.1))
    assert len(set(opt._sync.names.values())) == 4


SCENARIOS = {f.__name__: f for f in [
    equivalence, overlap, after_backward, passes2, predivide, groups, zero_grad_variants, unused_parameters, sparse,
    compression, clipping_and_state, closure, late_parameters, validation,
]}


if __name__ == "__main__":
    run_all(SCENARIOS)
