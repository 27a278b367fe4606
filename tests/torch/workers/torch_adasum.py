"""op=Adasum in ring_strategy.torch on real workers: `python torch_adasum.py SCENARIO...`.

Collectives (sync, async, in-place, grouped, autograd) and the
DistributedOptimizer's Adasum rule, checked against the numpy formula of
tests/workers/adasum_reference.py; every rank builds every rank's inputs
from seeds so it can compute the reference itself.
"""

import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import ring_strategy.torch as hvd
from tests.workers.adasum_reference import adasum
from tests.workers.checks import close, raises, run_scenarios

COUNTS = [(3, 5), (1,), (17,), (0,)]
SCALES = [1.0, 1e-2, 30.0, 1.0]


def value(r, t, dtype=torch.float32):
    g = torch.Generator().manual_seed(500 + t)
    shared = torch.randn(COUNTS[t], generator=g, dtype=torch.float64)
    own = torch.randn(COUNTS[t], generator=torch.Generator().manual_seed(r * 31 + t), dtype=torch.float64)
    return (SCALES[t] * (shared + 0.6 * own)).to(dtype)


def want(t, dtype=torch.float32):
    xs = [value(r, t, dtype).double().numpy() for r in range(hvd.size())]
    return torch.from_numpy(adasum(xs).reshape(COUNTS[t])).to(dtype)


def check(got, t, dtype=torch.float32, what=""):
    w = want(t, dtype)
    atol = 1e-5 * (float(w.abs().max()) if w.numel() else 1.0)
    close(got, w, f"{what} tensor {t}", rtol=1e-5, atol=atol)


def collectives():
    me = hvd.rank()
    check(hvd.allreduce(value(me, 0), op=hvd.Adasum), 0, what="allreduce")
    check(hvd.synchronize(hvd.allreduce_async(value(me, 2), op=hvd.Adasum)), 2, what="async")
    x = value(me, 2, torch.float64)
    hvd.allreduce_(x, op=hvd.Adasum)
    check(x, 2, torch.float64, "in place")
    # One grouped call: the tensors are fused, each keeps its own coefficients.
    outs = hvd.grouped_allreduce([value(me, t) for t in range(len(COUNTS))], op=hvd.Adasum)
    for t, out in enumerate(outs):
        check(out, t, what="grouped")
    ins = [value(me, t, torch.float64) for t in range(len(COUNTS))]
    hvd.synchronize(hvd.grouped_allreduce_async_(ins, op=hvd.Adasum))
    for t, out in enumerate(ins):
        check(out, t, torch.float64, "grouped in place")
    for dtype in (torch.float16, torch.bfloat16):
        got = hvd.allreduce(value(me, 0, dtype), op=hvd.Adasum)
        assert got.dtype == dtype
        close(got.float(), want(0, dtype).float(), f"{dtype}", rtol=2e-2, atol=5e-2)


def autograd():
    """The gradient of an Adasum allreduce is the Adasum allreduce of the gradient (as Horovod)."""
    me = hvd.rank()
    x = value(me, 2, torch.float64).requires_grad_()
    y = hvd.allreduce(x, op=hvd.Adasum)
    check(y, 2, torch.float64, "forward")
    y.backward(value(me, 2, torch.float64))
    check(x.grad, 2, torch.float64, "backward")


def errors():
    raises(hvd.BadArgumentError, lambda: hvd.allreduce(torch.ones(3, dtype=torch.int64), op=hvd.Adasum),
           "floating-point", "int64")
    raises(hvd.BadArgumentError, lambda: hvd.reducescatter(torch.ones(4, 2), op=hvd.Adasum), "allreduce only")


def unsupported_size():
    raises(hvd.BadArgumentError, lambda: hvd.allreduce(torch.ones(3), op=hvd.Adasum), "power-of-two",
           "1, 2, 4, 8")
    raises(hvd.BadArgumentError, lambda: hvd.grouped_allreduce_([torch.ones(3)], op=hvd.Adasum), "power-of-two")


# ---------------------------------------------------------------- optimizer
STEPS, B, IN, OUT = 3, 4, 5, 2


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, 6), nn.Tanh(), nn.Linear(6, OUT)).double()


def batch(r, s):
    g = torch.Generator().manual_seed(100 * r + s)
    return torch.randn(B, IN, generator=g, dtype=torch.float64), torch.randn(B, OUT, generator=g, dtype=torch.float64)


def make_opt(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def reference():
    """The Adasum rule by hand: every rank's replica steps its own optimizer
    from the shared parameters on its own batch; the shared parameters move
    by the numpy Adasum of the replicas' changes, per parameter tensor."""
    n = hvd.size()
    shared = make_model()
    replicas = [make_model() for _ in range(n)]
    opts = [make_opt(m.parameters()) for m in replicas]
    for s in range(STEPS):
        deltas = []
        for r, (m, opt) in enumerate(zip(replicas, opts)):
            with torch.no_grad():
                for p, q in zip(m.parameters(), shared.parameters()):
                    p.copy_(q)
            opt.zero_grad()
            x, y = batch(r, s)
            F.mse_loss(m(x), y).backward()
            opt.step()
            deltas.append([(p - q).detach().numpy() for p, q in zip(m.parameters(), shared.parameters())])
        with torch.no_grad():
            for i, q in enumerate(shared.parameters()):
                q.add_(torch.from_numpy(adasum([d[i] for d in deltas])))
    return shared


def optimizer():
    model = make_model()
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()), named_parameters=model.named_parameters(),
                                   op=hvd.Adasum)
    assert isinstance(opt, torch.optim.SGD)
    for s in range(STEPS):
        opt.zero_grad()
        x, y = batch(hvd.rank(), s)
        F.mse_loss(model(x), y).backward()
        opt.step()
    ref = reference()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        close(p, q, name, rtol=1e-10, atol=1e-12)
    # Replicas stay identical.
    for name, p in model.named_parameters():
        close(hvd.allreduce(p.detach(), op=hvd.Max), p.detach(), f"{name} on every rank", rtol=0, atol=0)


def optimizer_groups():
    """Grouped reductions (several parameters fused) follow the same rule."""
    model = make_model()
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()), named_parameters=model.named_parameters(),
                                   op=hvd.Adasum, groups=1)
    for s in range(STEPS):
        opt.zero_grad()
        x, y = batch(hvd.rank(), s)
        F.mse_loss(model(x), y).backward()
        opt.step()
    for (name, p), q in zip(model.named_parameters(), reference().parameters()):
        close(p, q, name, rtol=1e-10, atol=1e-12)


SCENARIOS = {f.__name__: f for f in (collectives, autograd, errors, unsupported_size, optimizer, optimizer_groups)}

if __name__ == "__main__":
    hvd.init()
    ok = run_scenarios(SCENARIOS, sys.argv[1:], hvd.rank(), stop_at_failure=True, after_each=hvd.barrier)
    hvd.shutdown()
    sys.exit(0 if ok else 1)
