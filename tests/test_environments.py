"""Tests of the cluster environments (ring_strategy.environments)."""

from __future__ import annotations

import os
import socket
import sys
from unittest import mock

import pytest

from ring_strategy.environments import (
    DETECTION_ORDER,
    ClusterEnvironment,
    LocalEnvironment,
    RingrunEnvironment,
    detect_environment,
)

RINGRUN_ENV = {
    "RING_RANK": "2",
    "RING_SIZE": "4",
    "RING_LOCAL_RANK": "2",
    "RING_LOCAL_SIZE": "4",
    "RING_CROSS_RANK": "0",
    "RING_CROSS_SIZE": "1",
    "RING_RENDEZVOUS_ADDR": "127.0.0.1:29500",
    "RING_SECRET": "00ff" * 16,
    "RING_JOB_ID": "0123456789abcdef",
    "RING_HOSTNAME": "node7",
}


def test_ringrun_environment_reads_every_variable():
    env = RingrunEnvironment(RINGRUN_ENV)
    assert (env.rank, env.size, env.local_rank, env.local_size) == (2, 4, 2, 4)
    assert (env.cross_rank, env.cross_size) == (0, 1)
    assert env.rendezvous_address == "127.0.0.1:29500"
    assert env.secret == bytes.fromhex("00ff" * 16)
    assert env.job_id == "0123456789abcdef"
    assert env.host_id == "node7"
    assert "rank=2" in repr(env) and "00ff" not in repr(env)


def test_ringrun_environment_defaults():
    env = RingrunEnvironment({"RING_RANK": "0", "RING_SIZE": "1"})
    assert (env.local_rank, env.local_size, env.cross_rank, env.cross_size) == (0, 1, 0, 1)
    assert env.rendezvous_address is None and env.secret is None
    assert env.job_id and env.host_id == socket.gethostname()


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("RING_RANK", "abc", "RING_RANK should be an integer. Got: 'abc'"),
        ("RING_RANK", "4", "RING_RANK should be less than RING_SIZE=4. Got: '4'"),
        ("RING_RANK", "-1", "RING_RANK should be at least 0. Got: '-1'"),
        ("RING_SIZE", "0", "RING_SIZE should be at least 1. Got: '0'"),
        ("RING_LOCAL_RANK", "9", "RING_LOCAL_RANK should be less than RING_LOCAL_SIZE=4"),
        ("RING_LOCAL_SIZE", "5", "RING_LOCAL_SIZE should be at most RING_SIZE=4. Got: '5'"),
        ("RING_CROSS_RANK", "1", "RING_CROSS_RANK should be less than RING_CROSS_SIZE=1"),
        ("RING_RENDEZVOUS_ADDR", "nowhere", "should look like 'host:port'. Got: 'nowhere'"),
        ("RING_RENDEZVOUS_ADDR", "h:99999", "Got: 'h:99999'"),
        ("RING_JOB_ID", "../etc", "RING_JOB_ID should be"),
        ("RING_SECRET", "not-hex", "RING_SECRET should be"),
    ],
)
def test_ringrun_environment_rejects_bad_values(name, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RingrunEnvironment({**RINGRUN_ENV, name: value})


def test_bad_secret_is_not_quoted():
    with pytest.raises(ValueError) as info:
        RingrunEnvironment({**RINGRUN_ENV, "RING_SECRET": "zz-topsecret"})
    assert "topsecret" not in str(info.value)


@pytest.mark.parametrize("missing", ["RING_SIZE", "RING_RENDEZVOUS_ADDR", "RING_SECRET", "RING_JOB_ID"])
def test_ringrun_environment_requires(missing):
    env = {k: v for k, v in RINGRUN_ENV.items() if k != missing}
    with pytest.raises(ValueError, match=f"{missing} is not set"):
        RingrunEnvironment(env)


def test_local_environment():
    a, b = LocalEnvironment(), LocalEnvironment()
    assert (a.rank, a.size, a.local_rank, a.local_size, a.cross_rank, a.cross_size) == (
        0, 1, 0, 1, 0, 1)
    assert a.rendezvous_address is None and a.secret is None
    assert a.job_id != b.job_id
    assert a.host_id == socket.gethostname()
    assert LocalEnvironment.detect()


def test_detection_order_ends_with_local():
    assert DETECTION_ORDER[0] is RingrunEnvironment
    assert DETECTION_ORDER[-1] is LocalEnvironment
    assert all(issubclass(e, ClusterEnvironment) for e in DETECTION_ORDER)


def test_detect_ringrun():
    with mock.patch.dict(os.environ, RINGRUN_ENV, clear=True):
        assert RingrunEnvironment.detect()
        env = detect_environment()
    assert isinstance(env, RingrunEnvironment) and env.rank == 2


def test_detect_falls_back_to_local():
    with mock.patch.dict(os.environ, {"PATH": os.environ.get("PATH", "")}, clear=True):
        assert not RingrunEnvironment.detect()
        assert isinstance(detect_environment(), LocalEnvironment)


def test_detect_reports_bad_ringrun_variables():
    with mock.patch.dict(os.environ, {**RINGRUN_ENV, "RING_RANK": "x"}, clear=True):
        with pytest.raises(ValueError, match="RING_RANK"):
            detect_environment()


def test_environment_inside_ringrun(ringrun):
    result = ringrun(2, [sys.executable, "-c", (
        "from ring_strategy.environments import detect_environment as d; e = d(); "
        "print(type(e).__name__, e.rank, e.size, e.local_rank, len(e.secret))"
    )], timeout=60)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [
        "[0] RingrunEnvironment 0 2 0 32", "[1] RingrunEnvironment 1 2 1 32"]
