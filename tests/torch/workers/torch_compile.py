"""ring_strategy.torch under torch.compile on real workers:
`python torch_compile.py SCENARIO...`.

Each scenario compiles with ``fullgraph=True`` (a graph break is an error
there) and counts breaks with ``torch._dynamo.explain``; every result is
compared with the same calls made eagerly. Ranks hold different data, so a
collective that did not run would show. Prints "<rank>: <scenario> ok" per
scenario (tests/workers/checks.py). Inductor (the default backend) compiles
the gradient update; the rest uses "aot_eager", which traces the same graphs
(forward and backward) without generating code: Inductor's C++ compilation
of a backward graph costs tens of seconds on two cores.
"""

import sys

import torch

import ring_strategy.torch as hvd
from ring_strategy.exceptions import BadArgumentError
from tests.workers.checks import close, equal, identical_rows, raises, run_scenarios

N = ME = 0


def no_breaks(fn, *args):
    """Runs ``fn(*args)`` under Dynamo's explain (which runs its collectives)
    and checks it is one graph without breaks."""
    explained = torch._dynamo.explain(fn)(*args)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    return explained


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))


# ---------------------------------------------------------------- scenarios
def step():
    """A training step: the loss averaged in the graph (backward goes
    through the allreduce), the gradients averaged by a grouped allreduce
    and applied in a second compiled function."""
    torch.manual_seed(1 + ME)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    models = {"eager": make_model(), "compiled": make_model()}

    def loss_of(model):
        def loss(x, y):
            return hvd.allreduce(torch.nn.functional.mse_loss(model(x), y), name="compile.loss")
        return loss

    def update_of(model):
        params = list(model.parameters())

        def update():
            grads = hvd.grouped_allreduce([p.grad for p in params], op=hvd.Sum, postscale_factor=1.0 / N)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.sub_(0.1 * g)
                    p.grad = None
        return update

    spare = make_model()  # explain runs the functions: not on the models compared
    no_breaks(loss_of(spare), x, y)
    loss_of(spare)(x, y).backward()
    no_breaks(update_of(spare))
    fns = {"eager": (loss_of(models["eager"]), update_of(models["eager"])),
           "compiled": (torch.compile(loss_of(models["compiled"]), fullgraph=True, backend="aot_eager"),
                        torch.compile(update_of(models["compiled"]), fullgraph=True))}
    losses = {k: [] for k in fns}
    for _ in range(3):
        for kind, (loss, update) in fns.items():
            value = loss(x, y)
            value.backward()
            update()
            losses[kind].append(value.detach())
    close(torch.stack(losses["compiled"]), torch.stack(losses["eager"]), "losses", rtol=1e-5)
    for a, b in zip(models["compiled"].parameters(), models["eager"].parameters()):
        close(a.detach(), b.detach(), "parameters", rtol=1e-5)
    identical_rows(hvd.allgather(torch.cat([p.detach().reshape(-1) for p in models["compiled"].parameters()])[None]))


def optimizer():
    """DistributedOptimizer with a compiled model: its hooks reduce the
    gradients the compiled backward produced, as with an eager model."""
    torch.manual_seed(5 + ME)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    weights = {}
    for kind in ("eager", "compiled"):
        model = make_model()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        forward = model if kind == "eager" else torch.compile(model, fullgraph=True, backend="aot_eager")
        for _ in range(2):
            opt.zero_grad()
            torch.nn.functional.mse_loss(forward(x), y).backward()
            opt.step()
        weights[kind] = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    close(weights["compiled"], weights["eager"], "weights", rtol=1e-5)
    identical_rows(hvd.allgather(weights["compiled"][None]))


def ops():
    """Every collective in one graph, forward and backward, against eager."""
    torch._dynamo.config.capture_dynamic_output_shape_ops = True  # allgather, alltoall: sizes known at run time
    rows = 2 + ME  # ranks gather different row counts
    torch.manual_seed(3 + ME)
    inputs = [torch.randn(rows, 3, requires_grad=True), torch.randn(2 * N, 3, requires_grad=True)]

    def collectives(a, b):
        gathered = hvd.allgather(a * 2)
        root = hvd.broadcast(b + 1, root_rank=N - 1)
        scattered = hvd.reducescatter(b, op=hvd.Sum)
        sent, received = hvd.alltoall(b * 3, splits=[2] * N)
        grouped = hvd.grouped_allreduce([a.sum(0), b], op=hvd.Max)
        return gathered, root, scattered, sent, received, grouped[0], grouped[1]

    def run(fn):
        outs = fn(*inputs)
        sum(o.float().sum() * (i + 1) for i, o in enumerate(outs)).backward()
        grads = [t.grad.clone() for t in inputs]
        for t in inputs:
            t.grad = None
        return [o.detach() for o in outs], grads

    no_breaks(collectives, *inputs)
    want, want_grads = run(collectives)
    got, got_grads = run(torch.compile(collectives, fullgraph=True, backend="aot_eager"))
    for g, w, what in zip(got + got_grads, want + want_grads, ["allgather", "broadcast", "reducescatter", "alltoall",
                                                               "received", "grouped0", "grouped1", "grad a", "grad b"]):
        close(g, w, what)


def inplace():
    """The synchronous in-place forms in a graph, against eager."""
    def update(a, b, c):
        hvd.allreduce_(a, op=hvd.Sum)
        hvd.grouped_allreduce_([b, c], op=hvd.Max)
        hvd.broadcast_(c, root_rank=0)
        return a + 1

    def inputs():
        return [torch.full((3,), float(ME + 1)), torch.arange(4.0) * (ME + 1), torch.tensor([float(ME), 1.0])]

    no_breaks(update, *inputs())
    want, got = inputs(), inputs()
    want.append(update(*want))
    got.append(torch.compile(update, fullgraph=True, backend="aot_eager")(*got))
    for g, w, what in zip(got, want, ["allreduce_", "grouped_allreduce_ b", "grouped_allreduce_ c", "result"]):
        equal(g, w, what)


def opcheck():
    """torch.library.opcheck of every operator: schema, autograd
    registration, fake against real results, AOT dispatch."""
    ops = torch.ops.ring
    a = torch.randn(2 * N, 3, requires_grad=True)
    cases = [(ops.allreduce, (a, None, hvd.Sum, 1.0, 1.0, 0)),
             (ops.grouped_allreduce, ([a, torch.randn(2, requires_grad=True)], None, hvd.Average, 2.0, 0.5, 0)),
             (ops.allreduce_each, ([a.detach(), torch.randn(2)], ["check.a", "check.b"], hvd.Sum, 1.0, 1.0, 0)),
             (ops.broadcast, (a, 0, None, 0)),
             (ops.reducescatter, (a, None, hvd.Sum, 0, 1.0, 1.0)),
             (ops.allgather, (a, None, 0)),
             (ops.alltoall, (a, None, None, 0))]
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        for op, args in cases:
            torch.library.opcheck(op, args)


def names():
    """Names the caller gives are reused by every run of the graph; generated
    names follow the eager counter at run time, so eager and compiled calls
    mix in any order the ranks share."""
    fixed = torch.compile(lambda t: hvd.allreduce(t, name="compile.fixed", op=hvd.Sum), fullgraph=True,
                          backend="aot_eager")
    generated = torch.compile(lambda t: hvd.allreduce(t, op=hvd.Sum), fullgraph=True, backend="aot_eager")
    t = torch.full((2,), float(ME + 1))
    total = N * (N + 1) / 2
    for i in range(4):
        equal(fixed(t), torch.full((2,), total), "fixed name")
        equal(generated(t), torch.full((2,), total), "generated name")
        equal(hvd.allreduce(t, op=hvd.Sum), torch.full((2,), total), "eager between")
        equal(hvd.allreduce(t, name="compile.fixed", op=hvd.Sum), torch.full((2,), total), "eager, fixed name")


def errors():
    """Bad arguments fail at compile time with the eager path's messages
    (Dynamo wraps the BadArgumentError the operator's fake raised)."""
    refused = (BadArgumentError, torch._dynamo.exc.TorchRuntimeError)
    bad_op = torch.compile(lambda t: hvd.allreduce(t, op=99), fullgraph=True, backend="aot_eager")
    raises(refused, lambda: bad_op(torch.ones(2)), "op should be one of")
    not_member = hvd.ProcessSet([0])
    not_member.process_set_id = 7  # as if registered: no set of that id exists
    bad_set = torch.compile(lambda t: hvd.allreduce(t, process_set=not_member), fullgraph=True, backend="aot_eager")
    raises(refused, lambda: bad_set(torch.ones(2)), "no process set has id 7")
    hvd.barrier()


def main():
    global N, ME
    hvd.init()
    N, ME = hvd.size(), hvd.rank()
    run_scenarios(globals(), sys.argv[1:], ME, stop_at_failure=True, after_each=hvd.barrier)
    hvd.shutdown()


if __name__ == "__main__":
    main()
