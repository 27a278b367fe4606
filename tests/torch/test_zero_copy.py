"""What the torch front end hands the engine, checked in this process with the
engine calls replaced: contiguous tensors go in where they lie (no copy),
strided ones through one contiguous buffer whose result is copied back."""

import ctypes

import pytest
import torch

import ring_strategy
from ring_strategy._core import engine as core_engine
from ring_strategy.torch import _async_ops, mpi_ops

_TORCH_DTYPES = {code: dtype for dtype, code in _async_ops._DTYPE_CODES.items()}


def _tensor_at(view, dtype_code):
    """The memory the engine is handed, as a tensor: a CPU tensor arrives
    as (address, nbytes, shape)."""
    if not isinstance(view, tuple):
        return view
    address, nbytes, shape = view
    raw = (ctypes.c_uint8 * nbytes).from_address(address)
    return torch.frombuffer(raw, dtype=_TORCH_DTYPES[dtype_code]).reshape(tuple(shape))


@pytest.fixture
def engine(monkeypatch):
    """Records each enqueue (a group's member by member); waiting 'reduces' by
    writing 2 * input into the output.
    A world of one is started so that the front end finds its place (the
    global process set); its engine is never called."""
    calls = {}

    def enqueue(kind, name, inp, out, dtype_code, shape, **kw):
        hid = len(calls) + 1
        inp, out = _tensor_at(inp, dtype_code), None if out is None else _tensor_at(out, dtype_code)
        calls[hid] = dict(kind=kind, name=name, inp=inp, out=out, dtype_code=dtype_code, shape=list(shape), **kw)
        return hid

    def enqueue_reduce(kind, name, inp, out, dtype_code, op, prescale, postscale, process_set=0, wake=False):
        shape = _tensor_at(inp, dtype_code).shape
        return enqueue(kind, name, inp, out, dtype_code, shape, op=op, prescale=prescale, postscale=postscale,
                       process_set=process_set, wake=wake)

    def enqueue_group(kind, names, inputs, outputs, dtype_codes, **kw):
        outputs = outputs or [None] * len(names)
        return [enqueue(kind, nm, i, o, c, _tensor_at(i, c).shape, **kw)
                for nm, i, o, c in zip(names, inputs, outputs, dtype_codes)]

    def wait(hid):
        c = calls[hid]
        if c["out"] is not None:
            c["out"].copy_(c["inp"] * 2)
        return None, c["shape"], []

    monkeypatch.setattr(core_engine, "enqueue", enqueue)
    monkeypatch.setattr(core_engine, "enqueue_group", enqueue_group)
    monkeypatch.setattr(core_engine, "enqueue_reduce", enqueue_reduce)
    monkeypatch.setattr(core_engine, "wait_all", lambda hids, results=True: [wait(h) for h in hids])
    monkeypatch.setattr(core_engine, "poll", lambda hid: True)
    ring_strategy.init()
    yield calls
    ring_strategy.shutdown()


def test_inplace_contiguous_is_zero_copy(engine):
    t = torch.arange(6.0).reshape(2, 3)
    h = mpi_ops.allreduce_async_(t, op=mpi_ops.Sum, name="zc")
    (c,) = engine.values()
    assert c["inp"].data_ptr() == t.data_ptr() and c["out"].data_ptr() == t.data_ptr()
    assert c["dtype_code"] == core_engine.DTYPES["float32"] and c["shape"] == [2, 3] and c["name"] == "zc"
    assert mpi_ops.poll(h)
    assert mpi_ops.synchronize(h) is t
    assert t.tolist() == [[0, 2, 4], [6, 8, 10]]


def test_out_of_place_reads_input_in_place(engine):
    t = torch.arange(4, dtype=torch.bfloat16)
    out = mpi_ops.synchronize(mpi_ops.allreduce_async(t, name="oop"))
    (c,) = engine.values()
    assert c["inp"].data_ptr() == t.data_ptr() and c["out"].data_ptr() != t.data_ptr()
    assert c["dtype_code"] == core_engine.DTYPES["bfloat16"] and c["op"] == mpi_ops.Average
    assert out.tolist() == [0, 2, 4, 6] and t.tolist() == [0, 1, 2, 3]


def test_strided_inplace_goes_through_a_buffer_and_back(engine):
    base = torch.zeros(3, 4)
    col = base[:, 1]
    col += torch.tensor([1.0, 2.0, 3.0])
    h = mpi_ops.allreduce_async_(col, name="col")
    (c,) = engine.values()
    assert c["inp"].is_contiguous() and c["inp"].data_ptr() != base.data_ptr()
    assert mpi_ops.synchronize(h) is col
    assert base[:, 1].tolist() == [2, 4, 6] and base[:, [0, 2, 3]].abs().sum() == 0


def test_broadcast_inplace_and_grouped(engine):
    a, b = torch.ones(2), torch.ones(3, 2).t()
    h = mpi_ops.grouped_allreduce_async_([a, b], name="g")
    assert [c["name"] for c in engine.values()] == ["g.0", "g.1"]
    assert mpi_ops.synchronize(h) == [a, b] and a.tolist() == [2, 2] and b.eq(2).all()
    t = torch.ones(5, dtype=torch.int64)
    h = mpi_ops.broadcast_async_(t, 0, name="bc")
    assert engine[3]["inp"].data_ptr() == t.data_ptr() == engine[3]["out"].data_ptr()
    assert mpi_ops.synchronize(h) is t


def test_requires_grad_tensor_is_read_where_it_lies(engine):
    w = torch.ones(3, requires_grad=True)
    mpi_ops.synchronize(mpi_ops.allreduce_async(w, name="w"))
    (c,) = engine.values()
    assert c["inp"].data_ptr() == w.data_ptr() and not w.grad_fn


def test_local_errors_send_nothing(engine):
    with pytest.raises(mpi_ops.BadArgumentError, match="torch.complex64"):
        mpi_ops.allreduce_async(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(ValueError, match="meta"):
        mpi_ops.broadcast_async_(torch.zeros(2, device="meta"), 0)
    with pytest.raises(mpi_ops.BadArgumentError, match="op should be one of"):
        mpi_ops.allreduce_async_(torch.zeros(2), op=42)
    with pytest.raises(ValueError, match="supersedes"):
        mpi_ops.allreduce_async(torch.zeros(2), average=True, op=mpi_ops.Sum)
    with pytest.warns(DeprecationWarning, match="op"):
        mpi_ops.synchronize(mpi_ops.allreduce_async(torch.zeros(2), average=False))
    assert [c["op"] for c in engine.values()] == [mpi_ops.Sum]
