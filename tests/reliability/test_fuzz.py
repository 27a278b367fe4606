"""Fuzzing the parsers of bytes that come from other processes.

The engine's parsers (``ring_strategy._native.parse``: 'request_list',
'response_list', 'handshake', 'endpoint') and the rendezvous store's frame
parser (ring_strategy/runner/store.py) get arbitrary bytes and near-valid
encodings with one thing wrong. They must only ever end in a clean error:
a ``RingError`` subclass for the engine, the exceptions the store's
connection loop catches for the store. No crash, no hang (a deadline per
example), no allocation of what a length prefix claims before it is checked.

Each property runs a few hundred examples in ``make test`` and 10,000 under
the ``slow`` marker: ``.venv/bin/python -m pytest -m slow tests/reliability/test_fuzz.py``.
"""

from __future__ import annotations

import resource
import struct
from datetime import timedelta
from typing import Callable, List, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ring_strategy import _native

SHORT = settings(max_examples=150, deadline=timedelta(seconds=2), database=None,
                 suppress_health_check=[HealthCheck.too_slow])
LONG = settings(max_examples=10_000, deadline=timedelta(seconds=2), database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
KINDS = ["request_list", "response_list", "handshake", "endpoint"]
OP_TYPES = _native.NUM_OP_TYPES  # allreduce .. join (engine/message.h)
ERROR_KINDS = _native.NUM_ERROR_KINDS  # Internal .. Shutdown (native/common/error.h)
DTYPES = sorted(_native.DTYPES.values())
REDUCE_OPS = sorted(_native.REDUCE_OPS.values())


# ------------------------------------------------------------- encoders
# The engine's little-endian control-message encoding (native/engine/wire.h,
# message.cc, message_impl.h), so that valid messages can be built and then
# broken one way at a time.

def _u8(v: int) -> bytes:
    return struct.pack("<B", v)


def _u32(v: int) -> bytes:
    return struct.pack("<I", v)


def _str(s: bytes) -> bytes:
    return _u32(len(s)) + s


def _i64s(v: List[int]) -> bytes:
    return _u32(len(v)) + b"".join(struct.pack("<q", x) for x in v)


_names = st.binary(max_size=24)
_i64 = st.integers(-(2 ** 63), 2 ** 63 - 1)
_f64 = st.floats(allow_nan=True, allow_infinity=True)


@st.composite
def requests(draw: Callable) -> bytes:
    """One encoded Request with valid enums."""
    return (_str(draw(_names)) + _u8(draw(st.integers(0, OP_TYPES - 1))) + _u8(draw(st.sampled_from(DTYPES)))
            + _u8(draw(st.sampled_from(REDUCE_OPS))) + _u32(draw(st.integers(0, 2 ** 32 - 1)))
            + struct.pack("<dd", draw(_f64), draw(_f64))
            + _i64s(draw(st.lists(_i64, max_size=6))) + _i64s(draw(st.lists(_i64, max_size=6))) + _u8(0) + _u32(0)
            + _u32(draw(st.integers(0, 2 ** 32 - 1))))  # device: cpu; process set


@st.composite
def request_lists(draw: Callable) -> bytes:
    """A valid encoded RequestList."""
    reqs = draw(st.lists(requests(), max_size=4))
    flags = _u8(draw(st.integers(0, 255))) + _u8(draw(st.integers(0, 255)))  # shutdown, abort
    header = flags + _u8(draw(st.integers(0, ERROR_KINDS - 1))) + _str(draw(st.binary(max_size=16)))  # kind, reason
    return header + _str(draw(st.binary(max_size=16))) + _u32(len(reqs)) + b"".join(reqs)


@st.composite
def responses(draw: Callable) -> bytes:
    """One encoded Response with valid enums and names sent in full."""
    names = draw(st.lists(_names, max_size=4))
    return (_u8(draw(st.integers(0, 1))) + _u8(draw(st.integers(0, OP_TYPES - 1))) + _u32(len(names))
            + b"".join(_u8(0) + _str(n) for n in names) + _i64s(draw(st.lists(_i64, max_size=6)))
            + _u8(draw(st.sampled_from(DTYPES))) + _u8(draw(st.sampled_from(REDUCE_OPS)))
            + struct.pack("<dd", draw(_f64), draw(_f64)) + _u32(draw(st.integers(0, 2 ** 32 - 1)))
            + _str(draw(st.binary(max_size=32))) + _u8(0) + _u32(0)  # device: cpu
            + struct.pack("<q", draw(st.integers(0, 2 ** 31 - 1))))  # process set


@st.composite
def response_lists(draw: Callable) -> bytes:
    """A valid encoded ResponseList."""
    puts = draw(st.lists(st.tuples(_names, st.integers(0, 2 ** 32 - 1)), max_size=3))
    resps = draw(st.lists(responses(), max_size=3))
    header = (_u8(draw(st.integers(0, 255))) + _u8(draw(st.integers(0, ERROR_KINDS - 1)))
              + struct.pack("<q", draw(st.integers(-1, 2 ** 30))))  # shutdown, its kind, the rank that ended it
    return (header + _str(draw(st.binary(max_size=16))) + _u32(len(puts))
            + b"".join(_str(n) + _u32(i) for n, i in puts) + _u32(len(resps)) + b"".join(resps)
            + struct.pack("<q", draw(_i64)))


@st.composite
def broken(draw: Callable, valid: st.SearchStrategy) -> bytes:
    """A valid encoding with one thing wrong: truncated, a byte changed, a
    huge length written somewhere, or junk appended."""
    data = draw(valid)
    how = draw(st.sampled_from(["truncate", "flip", "length", "append"]))
    if how == "truncate":
        return data[: draw(st.integers(0, max(0, len(data) - 1)))]
    if how == "append":
        return data + draw(st.binary(min_size=1, max_size=8))
    at = draw(st.integers(0, max(0, len(data) - 1)))
    if how == "flip":
        return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]
    return data[:at] + _u32(draw(st.sampled_from([2 ** 20, 2 ** 24 + 1, 2 ** 31, 2 ** 32 - 1]))) + data[at + 4:]


def _hello(connector: int, acceptor: int, nonce: bytes, magic: bytes = b"RING1", version: int = 1) -> bytes:
    return magic + _u8(version) + b"\0\0" + _u32(connector) + _u32(acceptor) + nonce


@st.composite
def handshakes(draw: Callable) -> bytes:
    """A Hello to rank 0 of 4 (the parser's acceptor), perhaps bent, then bytes."""
    hello = _hello(draw(st.integers(0, 5)), draw(st.sampled_from([0, 0, 1, 2 ** 32 - 1])),
                   draw(st.binary(min_size=32, max_size=32)),
                   draw(st.sampled_from([b"RING1", b"RING1", b"RING2", b"\0" * 5])),
                   draw(st.sampled_from([1, 1, 0, 2, 255])))
    return hello + draw(st.binary(max_size=80))


_field = st.one_of(st.text(max_size=12), st.integers(-(2 ** 70), 2 ** 70).map(str),
                   st.sampled_from(["", "0", "-1", "65536", "2147483648", "1e3", " 1", "0x10", "1;2", "=", "\0"]))


@st.composite
def endpoints(draw: Callable) -> bytes:
    """An endpoint string built from its grammar, values of any kind."""
    keys = ["rank", "host_id", "hostname", "pid", "addr", "port", "shm"]
    fields = [f"{k}={draw(_field)}" for k in keys]
    if draw(st.booleans()):
        fields = draw(st.permutations(fields))
    text = draw(st.sampled_from(["ring1", "ring1", "ring2", ""])) + ";" + ";".join(fields)
    return text.encode("utf-8", "surrogatepass")


# ------------------------------------------------------------- properties

def _parse_cleanly(kind: str, data: bytes) -> Optional[BaseException]:
    """Runs the engine's parser; returns the RingError it raised, if any.
    Any other exception propagates and fails the test."""
    try:
        _native.parse(kind, data)
    except _native.RingError as e:
        assert str(e), f"{kind}: an error without a message"
        return e
    return None


def check_any_bytes(kind: str, data: bytes) -> None:
    _parse_cleanly(kind, data)


def check_valid_request_list(data: bytes) -> None:
    assert _parse_cleanly("request_list", data) is None


def check_valid_response_list(data: bytes) -> None:
    assert _parse_cleanly("response_list", data) is None


def check_handshake(data: bytes) -> None:
    err = _parse_cleanly("handshake", data)
    if len(data) >= 48 + 32:  # a whole Hello and Proof: no proof can be right without the secret
        assert isinstance(err, _native.BadArgumentError), (data.hex(), err)


def check_endpoint(data: bytes) -> None:
    _parse_cleanly("endpoint", data)


@pytest.mark.parametrize("kind", KINDS)
@SHORT
@given(data=st.binary(max_size=512))
def test_engine_parsers_any_bytes(kind: str, data: bytes) -> None:
    check_any_bytes(kind, data)


@SHORT
@given(data=request_lists())
def test_valid_request_lists_parse(data: bytes) -> None:
    check_valid_request_list(data)


@SHORT
@given(data=response_lists())
def test_valid_response_lists_parse(data: bytes) -> None:
    check_valid_response_list(data)


@SHORT
@given(data=broken(request_lists()))
def test_broken_request_lists(data: bytes) -> None:
    check_any_bytes("request_list", data)


@SHORT
@given(data=broken(response_lists()))
def test_broken_response_lists(data: bytes) -> None:
    check_any_bytes("response_list", data)


@SHORT
@given(data=handshakes())
def test_handshakes(data: bytes) -> None:
    check_handshake(data)


@SHORT
@given(data=endpoints())
def test_endpoints(data: bytes) -> None:
    check_endpoint(data)


LONG_CASES = [
    ("any request_list", st.binary(max_size=1024), lambda d: check_any_bytes("request_list", d)),
    ("any response_list", st.binary(max_size=1024), lambda d: check_any_bytes("response_list", d)),
    ("any handshake", st.binary(max_size=256), lambda d: check_any_bytes("handshake", d)),
    ("any endpoint", st.binary(max_size=256), lambda d: check_any_bytes("endpoint", d)),
    ("valid request_list", request_lists(), check_valid_request_list),
    ("valid response_list", response_lists(), check_valid_response_list),
    ("broken request_list", broken(request_lists()), lambda d: check_any_bytes("request_list", d)),
    ("broken response_list", broken(response_lists()), lambda d: check_any_bytes("response_list", d)),
    ("handshake", handshakes(), check_handshake),
    ("endpoint", endpoints(), check_endpoint),
]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 10,000 cases take minutes on a busy machine
@pytest.mark.parametrize("kind, strategy, check", LONG_CASES, ids=[c[0].replace(" ", "-") for c in LONG_CASES])
def test_engine_parsers_long(kind: str, strategy: st.SearchStrategy, check: Callable[[bytes], None]) -> None:
    """10,000 examples of each engine property."""
    LONG(given(strategy)(check))()


def test_claimed_lengths_are_not_allocated() -> None:
    """Length prefixes of up to 4 GiB are checked against the bytes that
    are there before anything is allocated: peak memory stays put."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    huge = _u32(2 ** 32 - 1)
    no_abort, no_end = b"\0\0\0", b"\0\0" + struct.pack("<q", -1)
    frames = {  # each length in turn: the first string, then the counts that follow
        "request_list": [no_abort + huge, no_abort + _u32(0) + huge, no_abort + _u32(0) + _u32(0) + huge],
        "response_list": [no_end + huge, no_end + _u32(0) + huge, no_end + _u32(0) + _u32(0) + huge],
    }
    for kind, cases in frames.items():
        for data in cases:
            for pad in (b"", b"\0" * 4096):
                err = _parse_cleanly(kind, data + pad)
                assert err is not None and "out of range" in str(err), (kind, data, err)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 32, f"peak memory grew by {grown_mib:.0f} MiB"


def test_handshake_frames() -> None:
    """A well-formed Hello waits for the proof; a wrong proof, a Hello for
    another rank, from a lower rank, or with another magic is refused."""
    nonce = bytes(range(32))
    assert _parse_cleanly("handshake", _hello(1, 0, nonce)) is None
    refused = {
        "wrong proof": _hello(1, 0, nonce) + b"\0" * 32,
        "other acceptor": _hello(1, 2, nonce),
        "from itself": _hello(0, 0, nonce),
        "rank beyond the job": _hello(4, 0, nonce),
        "bad magic": _hello(1, 0, nonce, magic=b"HTTP/"),
        "bad version": _hello(1, 0, nonce, version=2),
    }
    for label, data in refused.items():
        assert isinstance(_parse_cleanly("handshake", data), _native.BadArgumentError), label
