"""ring_strategy.torch collectives on real workers: `python torch_ops.py SCENARIO...`.

Each scenario runs on every rank and prints "<rank>: <scenario> ok" when its
checks pass (tests/workers/checks.py). The first failure prints its traceback
and exits at once (ringrun then stops the other ranks), so a broken scenario
cannot leave ranks waiting on each other's collectives.
"""

import sys
import warnings

import torch

import ring_strategy.torch as hvd
from tests.workers.checks import close, equal, raises, run_scenarios

N = ME = 0

# dtype -> ops it supports
INT_OPS = ["Sum", "Average", "Min", "Max", "Product"]
DTYPES = {
    torch.uint8: INT_OPS, torch.int8: INT_OPS, torch.int16: INT_OPS, torch.int32: INT_OPS, torch.int64: INT_OPS,
    torch.float16: INT_OPS, torch.bfloat16: INT_OPS, torch.float32: INT_OPS, torch.float64: INT_OPS,
    torch.bool: ["Sum", "Min", "Max", "Product"],
}


def value(r, shape, dtype):
    """Rank r's input: small integers so every dtype and op is exact."""
    numel = 1
    for s in shape:
        numel *= s
    base = (torch.arange(numel, dtype=torch.float64) % 3 + r + 1).reshape(shape)
    return (base % 2 == 0) if dtype == torch.bool else base.to(dtype)


def reduce_expected(op, xs, dtype):
    """What the engine's op should give over the ranks' inputs."""
    if dtype == torch.bool:
        stack = torch.stack([x.to(torch.int64) for x in xs])
        red = {"Sum": stack.max(0).values, "Max": stack.max(0).values, "Min": stack.min(0).values,
               "Product": stack.min(0).values}[op]
        return red.bool()
    stack = torch.stack([x.to(torch.float64) for x in xs])
    red = {"Sum": lambda: stack.sum(0), "Min": lambda: stack.min(0).values, "Max": lambda: stack.max(0).values,
           "Product": lambda: stack.prod(0), "Average": lambda: stack.sum(0) / len(xs)}[op]()
    if op == "Average" and not dtype.is_floating_point:
        red = torch.trunc(red)
    return red.to(dtype)


# ---------------------------------------------------------------- scenarios
def allreduce():
    for dtype, ops in DTYPES.items():
        for op in ops:
            xs = [value(r, (3, 4), dtype) for r in range(N)]
            want = reduce_expected(op, xs, dtype)
            code = getattr(hvd, op)
            check = close if op == "Average" and dtype.is_floating_point else equal
            check(hvd.allreduce(xs[ME], op=code), want, (dtype, op))
            t = xs[ME].clone()
            res = hvd.allreduce_(t, op=code)
            assert res is t, "allreduce_ returns its tensor"
            check(t, want, (dtype, op, "in place"))
    # async forms, poll, the input untouched
    x = value(ME, (100,), torch.float32)
    h = hvd.allreduce_async(x, op=hvd.Sum, name="ar.async")
    h2 = hvd.allreduce_async_(x, op=hvd.Max, name="ar.async_")
    out = hvd.synchronize(h)
    while not hvd.poll(h2):
        pass
    want_sum = reduce_expected("Sum", [value(r, (100,), torch.float32) for r in range(N)], torch.float32)
    equal(out, want_sum, "async")
    assert hvd.synchronize(h2) is x
    equal(x, reduce_expected("Max", [value(r, (100,), torch.float32) for r in range(N)], torch.float32), "async_")
    # scale factors, default op Average
    y = hvd.allreduce(torch.full((5,), float(ME + 1), dtype=torch.float64), prescale_factor=2.0,
                      postscale_factor=0.5)
    equal(y, torch.full((5,), (N + 1) / 2, dtype=torch.float64), "scaled average")
    # non-contiguous: a transposed and a strided view
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) + ME
    view = base.t()
    assert not view.is_contiguous()
    want = (torch.arange(12, dtype=torch.float32).reshape(3, 4) * N + N * (N - 1) / 2).t()
    equal(hvd.allreduce(view, op=hvd.Sum), want.contiguous(), "transposed")
    res = hvd.allreduce_(view, op=hvd.Sum)
    assert res is view
    equal(base, want.t().contiguous(), "transposed in place writes through")
    col = torch.zeros(4, 3, dtype=torch.int64)
    col[:, 1] = ME + 1
    hvd.allreduce_(col[:, 1], op=hvd.Sum)
    assert col[:, 1].tolist() == [N * (N + 1) // 2] * 4 and col[:, 0].abs().sum() == 0, col
    # 0-d and empty tensors, a tensor that requires grad through the async form
    equal(hvd.allreduce(torch.tensor(float(ME)), op=hvd.Sum), torch.tensor(N * (N - 1) / 2), "0-d")
    equal(hvd.allreduce(torch.zeros(0, 3)), torch.zeros(0, 3), "empty")
    w = torch.ones(3, requires_grad=True)
    equal(hvd.synchronize(hvd.allreduce_async(w, op=hvd.Sum)), torch.full((3,), float(N)), "requires_grad")
    # A view whose negation torch applies lazily holds -values in memory: the
    # engine must reduce the values (the negative bit is resolved first).
    neg = torch._neg_view(torch.ones(3))
    equal(hvd.allreduce(neg, op=hvd.Sum), torch.full((3,), -float(N)), "negative view")
    hvd.allreduce_(neg, op=hvd.Sum)
    equal(neg.resolve_neg(), torch.full((3,), -float(N)), "negative view in place")


def grouped_allreduce():
    xs = [value(ME, (7,), torch.float32), value(ME, (2, 3), torch.int32), value(ME, (4,), torch.bfloat16)]
    wants = [reduce_expected("Sum", [value(r, x.shape, x.dtype) for r in range(N)], x.dtype) for x in xs]
    for got, want in zip(hvd.grouped_allreduce(xs, op=hvd.Sum), wants):
        equal(got, want, "grouped")
    for got, want in zip(hvd.synchronize(hvd.grouped_allreduce_async(xs, op=hvd.Sum, name="grp")), wants):
        equal(got, want, "grouped async")
    ts = [x.clone() for x in xs] + [torch.arange(6.0).reshape(2, 3).t() + ME]
    wants.append((torch.arange(6.0).reshape(2, 3).t() * N + N * (N - 1) / 2).contiguous())
    res = hvd.grouped_allreduce_(ts, op=hvd.Sum)
    assert all(a is b for a, b in zip(res, ts))
    for got, want in zip(ts, wants):
        equal(got.contiguous(), want, "grouped in place")
    ts = [x.clone() for x in xs]
    h = hvd.grouped_allreduce_async_(ts, op=hvd.Sum)
    res = hvd.synchronize(h)
    assert all(a is b for a, b in zip(res, ts))
    for got, want in zip(ts, wants):
        equal(got, want, "grouped async in place")
    assert hvd.grouped_allreduce([]) == []


def allgather():
    for dtype in DTYPES:
        rows = [r + 1 for r in range(N)]
        want = torch.cat([value(r, (rows[r], 3), dtype) for r in range(N)])
        equal(hvd.allgather(value(ME, (rows[ME], 3), dtype)), want, dtype)
    # a rank with no rows, a 0-d tensor, a non-contiguous one, the async form
    rows = [0 if r == 0 else 2 for r in range(N)]
    want = torch.cat([torch.full((rows[r], 2), float(r)) for r in range(N)])
    equal(hvd.allgather(torch.full((rows[ME], 2), float(ME))), want, "zero rows")
    equal(hvd.allgather(torch.tensor(ME)), torch.arange(N), "0-d")
    base = torch.arange(6.0).reshape(2, 3) + 10 * ME
    want = torch.cat([(torch.arange(6.0).reshape(2, 3) + 10 * r).t() for r in range(N)])
    equal(hvd.allgather(base.t()), want, "transposed")
    h = hvd.allgather_async(torch.full((2,), ME, dtype=torch.int16), name="ag.async")
    equal(hvd.synchronize(h), torch.arange(N, dtype=torch.int16).repeat_interleave(2), "async")
    xs = [torch.full((ME + 1,), ME, dtype=torch.float16), torch.full((1, 2), ME, dtype=torch.bool)]
    wants = [torch.cat([torch.full((r + 1,), r, dtype=torch.float16) for r in range(N)]),
             torch.cat([torch.full((1, 2), r, dtype=torch.bool) for r in range(N)])]
    for got, want in zip(hvd.grouped_allgather(xs), wants):
        equal(got, want, "grouped")
    for got, want in zip(hvd.synchronize(hvd.grouped_allgather_async(xs)), wants):
        equal(got, want, "grouped async")


def broadcast():
    for root in range(N):
        for dtype in (torch.float32, torch.bfloat16, torch.bool, torch.int64, torch.uint8):
            x = value(ME, (3, 5), dtype)
            want = value(root, (3, 5), dtype)
            equal(hvd.broadcast(x, root), want, (root, dtype))
            equal(x, value(ME, (3, 5), dtype), "input untouched")
            res = hvd.broadcast_(x, root_rank=root)
            assert res is x
            equal(x, want, (root, dtype, "in place"))
        x = torch.full((4,), float(ME))
        h = hvd.broadcast_async(x, root, name=f"bc.async.{root}")
        equal(hvd.synchronize(h), torch.full((4,), float(root)), "async")
        h = hvd.broadcast_async_(x, root)
        assert hvd.synchronize(h) is x and x.tolist() == [float(root)] * 4
        # in place into a column of a larger tensor
        m = torch.full((3, 3), -1.0)
        m[:, 2] = ME
        hvd.broadcast_(m[:, 2], root)
        assert m[:, 2].tolist() == [float(root)] * 3 and m[:, :2].eq(-1).all(), m


def alltoall():
    # even split, no splits given: the output alone
    x = torch.arange(2 * N) + 100 * ME
    want = torch.cat([torch.arange(2 * ME, 2 * ME + 2) + 100 * r for r in range(N)])
    equal(hvd.alltoall(x), want, "even")
    # uneven splits (rank r sends r + d + 1 rows to rank d), 2-D, bfloat16
    splits = [ME + d + 1 for d in range(N)]
    rows = sum(splits)
    x = (torch.arange(rows, dtype=torch.float32)[:, None] + 1000 * ME).repeat(1, 2).to(torch.bfloat16)
    out, received = hvd.alltoall(x, splits=splits)
    assert received.dtype == torch.int32 and received.tolist() == [r + ME + 1 for r in range(N)], received
    parts = []
    for r in range(N):
        start = sum(r + d + 1 for d in range(ME))
        parts.append((torch.arange(start, start + r + ME + 1, dtype=torch.float32)[:, None] + 1000 * r)
                     .repeat(1, 2).to(torch.bfloat16))
    equal(out, torch.cat(parts), "uneven")
    # splits as an int64 tensor; the async form returns the pair
    h = hvd.alltoall_async(x, splits=torch.tensor(splits, dtype=torch.int64), name="a2a.async")
    out2, received2 = hvd.synchronize(h)
    equal(out2, out, "async")
    assert received2.dtype == torch.int64 and received2.tolist() == received.tolist()
    # a rank that sends nothing to anyone
    zs = [0] * N if ME == 0 else [1] * N
    out, received = hvd.alltoall(torch.full((sum(zs),), float(ME)), splits=zs)
    equal(out, torch.full((N - 1,), 0.0) + torch.arange(1, N, dtype=torch.float32), "zero splits")


def reducescatter():
    for rows in (5, 7, 2 * N):
        base = [torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2) + r for r in range(N)]
        total = sum(base)
        counts = [rows // N + (1 if r < rows % N else 0) for r in range(N)]
        start = sum(counts[:ME])
        mine = total[start:start + counts[ME]]
        equal(hvd.reducescatter(base[ME], op=hvd.Sum), mine, ("sum", rows))
        close(hvd.reducescatter(base[ME]), mine / N, ("average", rows))
        equal(hvd.synchronize(hvd.reducescatter_async(base[ME], op=hvd.Sum)), mine, "async")
        equal(hvd.reducescatter(base[ME], op=hvd.Sum, prescale_factor=2.0, postscale_factor=3.0), mine * 6, "scaled")
        equal(hvd.reducescatter(base[ME].t().contiguous().t(), op=hvd.Sum), mine, "non-contiguous")
    ints = [torch.arange(6, dtype=torch.int32).reshape(3, 2) * (r + 1) for r in range(N)]
    c3 = [3 // N + (1 if r < 3 % N else 0) for r in range(N)]
    s3 = sum(c3[:ME])
    want_int = sum(ints)[s3:s3 + c3[ME]]
    want_f = sum(torch.ones(4, 3) * (r + 1) for r in range(N))
    c4 = [4 // N + (1 if r < 4 % N else 0) for r in range(N)]
    s4 = sum(c4[:ME])
    outs = hvd.grouped_reducescatter([ints[ME], torch.ones(4, 3) * (ME + 1)], op=hvd.Sum)
    equal(outs[0], want_int, "grouped int")
    equal(outs[1], want_f[s4:s4 + c4[ME]], "grouped float")
    outs = hvd.synchronize(hvd.grouped_reducescatter_async([ints[ME], torch.ones(4, 3) * (ME + 1)], op=hvd.Sum))
    equal(outs[0], want_int, "grouped async")


def grads():
    tri = N * (N + 1) / 2  # sum over ranks of (r + 1)
    g_me = float(ME + 1)
    # allreduce: Sum, Average, scale factors
    for op, pre, post, want in [(hvd.Sum, 1.0, 1.0, tri), (hvd.Average, 1.0, 1.0, tri / N),
                                (hvd.Sum, 2.0, 3.0, 6 * tri)]:
        x = torch.ones(4, dtype=torch.float64, requires_grad=True)
        y = hvd.allreduce(x, op=op, prescale_factor=pre, postscale_factor=post)
        assert y.requires_grad
        y.backward(torch.full((4,), g_me, dtype=torch.float64))
        close(x.grad, torch.full((4,), want, dtype=torch.float64), ("allreduce grad", op, pre, post))
    # grouped allreduce
    xs = [torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)]
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum)
    torch.autograd.backward(ys, [torch.full((2,), g_me), torch.full((3,), 2 * g_me)])
    close(xs[0].grad, torch.full((2,), tri), "grouped allreduce grad 0")
    close(xs[1].grad, torch.full((3,), 2 * tri), "grouped allreduce grad 1")
    # Differentiable on rank 0 only (autograd's Function there, none on the
    # others): the generated names still pair up, the results agree.
    for grad_here in (ME == 0, ME != 0):
        x = torch.ones(3, requires_grad=grad_here)
        y = hvd.allreduce(x, op=hvd.Sum)
        assert y.requires_grad == grad_here
        close(y.detach(), torch.full((3,), float(N)), "allreduce, grad on some ranks")
        ys = hvd.grouped_allreduce([x, torch.ones(2)], op=hvd.Sum)
        assert ys[0].requires_grad == grad_here
        close(ys[1].detach(), torch.full((2,), float(N)), "grouped allreduce, grad on some ranks")
        with torch.no_grad():
            assert not hvd.allreduce(x).requires_grad
    # allgather: this rank's rows of the averaged upstream gradient
    rows = [r + 1 for r in range(N)]
    total, off = sum(rows), sum(rows[:ME])
    x = torch.zeros(rows[ME], 2, dtype=torch.float64, requires_grad=True)
    y = hvd.allgather(x)
    gy = torch.arange(total, dtype=torch.float64)[:, None].repeat(1, 2) + g_me
    y.backward(gy)
    avg = torch.arange(total, dtype=torch.float64)[:, None].repeat(1, 2) + (N + 1) / 2
    close(x.grad, avg[off:off + rows[ME]], "allgather grad")
    s = torch.tensor(1.0, requires_grad=True)
    hvd.allgather(s).backward(torch.arange(N, dtype=torch.float32) + g_me)
    close(s.grad, torch.tensor(ME + (N + 1) / 2), "allgather 0-d grad")
    xs = [torch.zeros(rows[ME], requires_grad=True), torch.zeros(1, 3, requires_grad=True)]
    ys = hvd.grouped_allgather(xs)
    torch.autograd.backward(ys, [torch.arange(total, dtype=torch.float32) + g_me, torch.full((N, 3), g_me)])
    close(xs[0].grad, torch.arange(off, off + rows[ME], dtype=torch.float32) + (N + 1) / 2, "grouped allgather grad")
    close(xs[1].grad, torch.full((1, 3), (N + 1) / 2), "grouped allgather grad 1")
    # broadcast: the averaged gradient on the root, zeros elsewhere
    root = N - 1
    x = torch.ones(3, requires_grad=True)
    hvd.broadcast(x, root).backward(torch.full((3,), g_me))
    close(x.grad, torch.full((3,), (N + 1) / 2 if ME == root else 0.0), "broadcast grad")
    # alltoall: the gradient goes back to where each row came from
    splits = [ME + d + 1 for d in range(N)]
    x = torch.arange(sum(splits), dtype=torch.float32).requires_grad_()
    y, received = hvd.alltoall(x, splits=splits)
    assert not received.requires_grad
    (y * 10 + ME).backward(torch.ones_like(y) * (y.detach() * 10 + ME))  # d/dy of 5*y^2 + ME*y
    dest = torch.cat([torch.full((s,), float(d)) for d, s in enumerate(splits)])
    close(x.grad, (x.detach() * 10 + dest) * 10, "alltoall grad")
    x = torch.arange(2.0 * N).requires_grad_()
    hvd.alltoall(x).backward(torch.full((2 * N,), g_me))
    close(x.grad, torch.cat([torch.full((2,), d + 1.0) for d in range(N)]), "alltoall even grad")
    # reducescatter: allgather of the gradients, times size() for Sum, times the scale factors
    for op, pre, post, scale in [(hvd.Sum, 1.0, 1.0, N), (hvd.Average, 1.0, 1.0, 1), (hvd.Sum, 0.5, 4.0, 2 * N)]:
        counts = [5 // N + (1 if r < 5 % N else 0) for r in range(N)]
        x = torch.ones(5, 2, requires_grad=True)
        y = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post)
        y.backward(torch.full(y.shape, g_me))
        want = torch.cat([torch.full((counts[r], 2), float(r + 1)) for r in range(N)]) * scale
        close(x.grad, want, ("reducescatter grad", op, pre, post))
    xs = [torch.ones(3, requires_grad=True), torch.ones(N, 2, requires_grad=True)]
    ys = hvd.grouped_reducescatter(xs, op=hvd.Sum)
    torch.autograd.backward(ys, [torch.full(ys[0].shape, g_me), torch.full(ys[1].shape, g_me)])
    c3 = [3 // N + (1 if r < 3 % N else 0) for r in range(N)]
    close(xs[0].grad, torch.cat([torch.full((c3[r],), float(r + 1)) for r in range(N)]) * N, "grouped rs grad")
    close(xs[1].grad, torch.arange(1.0, N + 1)[:, None].repeat(1, 2) * N, "grouped rs grad 1")
    # through compression: the gradient comes back in the input's dtype
    x = torch.ones(3, requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert y.dtype == torch.float32
    y.backward(torch.full((3,), g_me))
    close(x.grad, torch.full((3,), tri), "compressed grad")


def compression():
    fine = 1 + 2.0 ** -12  # not representable in float16 or bfloat16
    x = torch.full((6,), fine, dtype=torch.float64)
    equal(hvd.allreduce(x, op=hvd.Sum), torch.full((6,), N * fine, dtype=torch.float64), "none")
    for comp, wire in ((hvd.Compression.fp16, torch.float16), (hvd.Compression.bf16, torch.bfloat16)):
        sent, ctx = comp.compress(x)
        assert sent.dtype == wire and ctx == torch.float64
        assert comp.decompress(sent, ctx).dtype == torch.float64
        y = hvd.allreduce(x, op=hvd.Sum, compression=comp)
        equal(y, torch.full((6,), float(N), dtype=torch.float64), (wire, "rounded on the wire"))
        i = torch.arange(4, dtype=torch.int32)
        assert comp.compress(i) == (i, None)
        equal(hvd.allreduce(i, op=hvd.Sum, compression=comp), i * N, (wire, "ints travel as they are"))
        ys = hvd.grouped_allreduce([x, torch.ones(2)], op=hvd.Average, compression=comp)
        equal(ys[0], torch.ones(6, dtype=torch.float64), (wire, "grouped"))
        equal(ys[1], torch.ones(2), (wire, "grouped 1"))
        r = hvd.reducescatter(torch.ones(N, 2) * 3, op=hvd.Sum, compression=comp)
        equal(r, torch.full((1, 2), 3.0 * N), (wire, "reducescatter"))
        g = hvd.grouped_reducescatter([torch.ones(N) * fine], op=hvd.Sum, compression=comp)
        equal(g[0], torch.full((1,), float(N)), (wire, "grouped reducescatter"))
    assert hvd.Compression.none.compress(x)[0] is x


def errors():
    x = torch.ones(3)
    # dtypes the engine has no code for
    raises(hvd.BadArgumentError, lambda: hvd.allreduce(torch.zeros(3, dtype=torch.complex64)), "torch.complex64")
    raises(hvd.BadArgumentError, lambda: hvd.allgather(torch.zeros(3, dtype=torch.uint16)), "torch.uint16")
    raises(ValueError, lambda: hvd.broadcast_(torch.zeros(3, dtype=torch.complex128), 0), "complex128")
    # a tensor not on the CPU
    meta = torch.empty(3, device="meta")
    for call in (lambda: hvd.allreduce(meta), lambda: hvd.allreduce_async_(meta), lambda: hvd.allgather(meta),
                 lambda: hvd.broadcast(meta, 0), lambda: hvd.alltoall(meta), lambda: hvd.reducescatter(meta)):
        raises(hvd.BadArgumentError, call, "meta", "CPU")
    raises(hvd.BadArgumentError, lambda: hvd.allreduce([1.0, 2.0]), "torch.Tensor")
    raises(hvd.BadArgumentError, lambda: hvd.allgather("x"), "torch.Tensor")
    raises(hvd.BadArgumentError, lambda: hvd.grouped_allgather([x, 3]), "torch.Tensor")
    raises(hvd.BadArgumentError, lambda: hvd.allreduce(torch.ones(2).to_sparse()), "layout")
    # bad root rank
    raises(hvd.BadArgumentError, lambda: hvd.broadcast(x, N))
    raises(hvd.BadArgumentError, lambda: hvd.broadcast_(x, -1))
    raises(hvd.BadArgumentError, lambda: hvd.broadcast(x, 0.5), "root_rank")
    # bad splits, 0-d reducescatter, Average on bool, Adasum, process sets
    raises(hvd.BadArgumentError, lambda: hvd.alltoall(torch.ones(3), splits=[1] * (N + 1)))
    raises(hvd.BadArgumentError, lambda: hvd.alltoall(torch.ones(3), splits=[4] + [0] * (N - 1)))
    if N > 1:
        raises(hvd.BadArgumentError, lambda: hvd.alltoall(torch.ones(N + 1)), "divisible")
    raises(hvd.BadArgumentError, lambda: hvd.reducescatter(torch.tensor(1.0)), "0-d")
    raises(hvd.BadArgumentError, lambda: hvd.allreduce(torch.ones(2, dtype=torch.bool), op=hvd.Average))
    raises(hvd.BadArgumentError, lambda: hvd.allreduce(x, op=42))
    raises(hvd.BadArgumentError, lambda: hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum),
           "floating-point")
    raises(hvd.BadArgumentError, lambda: hvd.reducescatter(torch.ones(4), op=hvd.Adasum), "allreduce only")
    if N > 1:
        sub = hvd.ProcessSet([0])  # never registered
        raises(hvd.BadArgumentError, lambda: hvd.allreduce(x, process_set=sub), "not registered")
        raises(hvd.BadArgumentError, lambda: hvd.barrier(process_set=sub), "not registered")
        raises(hvd.BadArgumentError, lambda: hvd.add_process_set([0]), "dynamic process sets")
    equal(hvd.allreduce(x, op=hvd.Sum, process_set=hvd.ProcessSet(list(range(N)))), x * N, "every rank as a set")
    # ranks that disagree get a MismatchError on every rank
    last = ME == N - 1
    if N > 1:
        raises(hvd.MismatchError, lambda: hvd.allreduce(torch.ones(3 + last), name="mm.shape"), "mm.shape", "shape")
        raises(hvd.MismatchError, lambda: hvd.allreduce(torch.ones(3, dtype=torch.float64 if last else torch.float32),
                                                         name="mm.dtype"), "dtype")
        raises(hvd.MismatchError, lambda: hvd.allgather(torch.ones(2, 2 + last), name="mm.gather"), "mm.gather")
        raises(hvd.MismatchError, lambda: hvd.broadcast(x, root_rank=int(last), name="mm.root"), "root")
        raises(hvd.MismatchError, lambda: hvd.reducescatter(torch.ones(4 + last, 2), name="mm.rs"), "mm.rs")
        h = hvd.grouped_allreduce_async([torch.ones(2), torch.ones(2 + last)], name="mm.group")
        raises(hvd.MismatchError, lambda: hvd.synchronize(h), "mm.group.1")
    # a name in flight twice. Rank r checks while the others wait in a barrier
    # it has not reached, so its first "dup<r>" cannot complete meanwhile (in a
    # world of one nothing holds it back: no check there).
    for r in range(N if N > 1 else 0):
        if ME == r:
            h = hvd.allreduce_async(x, name=f"dup{r}")
            raises(hvd.BadArgumentError, lambda: hvd.allreduce_async(x, name=f"dup{r}"), "already in flight")
            raises(ValueError, lambda: hvd.broadcast_async_(x, 0, name=f"dup{r}"), "already in flight")
        hvd.barrier()
        if ME != r:
            h = hvd.allreduce_async(x, name=f"dup{r}")
        equal(hvd.synchronize(h), x, "after the duplicate")
    h = hvd.allreduce_async(x)
    hvd.synchronize(h)
    # unknown handles: poll raises, synchronize gives None (as Horovod)
    raises(hvd.BadArgumentError, lambda: hvd.poll(h), "unknown handle")
    assert hvd.synchronize(h) is None
    # the engine keeps working after all of that
    equal(hvd.allreduce(x, op=hvd.Sum, name="after.errors"), x * N, "after errors")


def deprecation():
    x = torch.full((2,), float(ME + 1))
    for kwargs, want in (({"average": True}, (N + 1) / 2), ({"average": False}, N * (N + 1) / 2)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = hvd.allreduce(x, **kwargs)
        assert any(issubclass(w.category, DeprecationWarning) and "op" in str(w.message) for w in caught), caught
        equal(got, torch.full((2,), want), kwargs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t = x.clone()
            hvd.synchronize(hvd.allreduce_async_(t, **kwargs))
            got = hvd.grouped_allreduce([x], **kwargs)[0]
        assert len([w for w in caught if issubclass(w.category, DeprecationWarning)]) == 2, caught
        equal(t, torch.full((2,), want), kwargs)
        equal(got, torch.full((2,), want), kwargs)
    for call in (lambda: hvd.allreduce(x, average=True, op=hvd.Sum),
                 lambda: hvd.allreduce_async_(x, average=False, op=hvd.Average),
                 lambda: hvd.grouped_allreduce([x], average=True, op=hvd.Sum)):
        raises(ValueError, call, "supersedes")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        equal(hvd.allreduce(x), torch.full((2,), (N + 1) / 2), "no warning without average=")


def misc():
    assert (hvd.size(), hvd.rank()) == (N, ME)
    assert hvd.local_size() == N and hvd.local_rank() == ME and hvd.cross_size() == 1 and hvd.cross_rank() == 0
    assert hvd.is_initialized()
    for query in ("mpi_built", "gloo_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
                  "mpi_enabled", "gloo_enabled", "mpi_threads_supported", "gpu_available"):
        assert getattr(hvd, query)() is False, query  # this machine: no CUDA driver
    assert hvd.nccl_built() == 0  # no NCCL found (else its version code)
    gps = hvd.global_process_set
    assert gps.size() == N and gps.rank() == ME and gps.included() and gps.ranks == list(range(N))
    ps = hvd.ProcessSet(range(N))
    assert ps.size() == N and ps.rank() == ME and ps.included()
    # poll turns True and stays so; synchronize returns the result once
    h = hvd.allreduce_async(torch.ones(2), op=hvd.Sum)
    while not hvd.poll(h):
        pass
    assert hvd.poll(h)
    equal(hvd.synchronize(h), torch.full((2,), float(N)), "poll")
    # join: every rank gets the same last rank
    last = hvd.join()
    assert 0 <= last < N
    assert hvd.allgather(torch.tensor([last])).eq(last).all()
    hvd.barrier()
    # sparse allreduce, as DistributedOptimizer uses it for sparse gradients
    sp = torch.sparse_coo_tensor([[ME, 3]], [1.0, 2.0], (N + 3,), check_invariants=True)
    # (a function that synchronizes, as Horovod's returns)
    reduced = hvd.sparse_allreduce_async(sp, name="sparse", op=hvd.Sum)
    assert callable(reduced), type(reduced)
    got = reduced().to_dense()
    want = torch.zeros(N + 3)
    want[:N] = 1.0
    want[3] += 2.0 * N
    equal(got, want, "sparse")
    assert reduced() is reduced(), "a second call returns the same tensor"
    average = hvd.sparse_allreduce_async(sp, name="sparse", op=hvd.Average)().to_dense()
    close(average, want / N, "sparse average")
    # the Horovod names all exist
    for name in ("allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
                 "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "allgather",
                 "allgather_async", "grouped_allgather", "broadcast", "broadcast_", "broadcast_async",
                 "broadcast_async_", "alltoall", "reducescatter", "reducescatter_async", "grouped_reducescatter",
                 "poll", "synchronize", "join", "barrier", "Compression", "Average", "Sum", "Adasum", "Min", "Max",
                 "Product", "ProcessSet", "global_process_set", "init", "shutdown"):
        assert hasattr(hvd, name), name
    from ring_strategy.torch.mpi_ops import allgather, allreduce, broadcast  # noqa: F401  (as Horovod's optimizer does)


def main():
    global N, ME
    hvd.init()
    N, ME = hvd.size(), hvd.rank()
    run_scenarios(globals(), sys.argv[1:], ME, stop_at_failure=True, after_each=hvd.barrier)
    hvd.shutdown()


if __name__ == "__main__":
    main()
