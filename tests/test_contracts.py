"""The names ringrun, the workers and the engine share (ring_strategy/_contracts.py):
both languages agree on them, and each writer writes what its readers read."""

from __future__ import annotations

import os
import secrets
from typing import Iterator, Mapping, Set
from unittest import mock

import pytest

from ring_strategy import _contracts as names
from ring_strategy.environments import RingrunEnvironment
from ring_strategy.runner.worker_env import worker_environment

JOB_IDS = ["abc", "0123456789abcdef", "pl-0f3a", "ray_x-y", "a" * 64]
RANKS = [0, 1, 7, 12, 1023]


class _Recording(Mapping[str, str]):
    """A read-only environment that remembers which names were asked for."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self._values = dict(values)
        self.asked: Set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        return self._values[key]

    def __contains__(self, key: object) -> bool:
        self.asked.add(str(key))
        return key in self._values

    def get(self, key: str, default=None):  # type: ignore[override]
        self.asked.add(key)
        return self._values.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def _written(**overrides) -> dict:
    args = dict(rank=1, size=4, rendezvous_address="127.0.0.1:29400", secret=b"\x01" * 32, job_id="abc",
                start_timeout=30.0, hostname="node7", local_rank=1, local_size=2, cross_rank=0, cross_size=2)
    args.update(overrides)
    return worker_environment({}, **args)


# ---------------------------------------------------------------- shared memory
def test_shm_names_agree_with_the_engine():
    # Needs ring_strategy._native.shm_segment_names, the engine's own list.
    from ring_strategy import _native

    for job_id in JOB_IDS:
        for rank in RANKS:
            assert names.shm_segment_names(job_id, rank) == list(_native.shm_segment_names(job_id, rank)), (job_id, rank)


def test_shm_names_data_mesh_first():
    assert names.shm_segment_names("abc", 3) == ["/ring.abc.3", "/ring.abc-c.3"]
    assert names.shm_segment_paths("abc", [0, 1]) == [
        "/dev/shm/ring.abc.0", "/dev/shm/ring.abc-c.0", "/dev/shm/ring.abc.1", "/dev/shm/ring.abc-c.1"]


@pytest.mark.parametrize("job_id", ["", "../etc", "a.b", "a/b", "a" * 65, None, 7])
def test_shm_names_refuse_a_job_id_that_is_not_one(job_id):
    with pytest.raises(ValueError, match="RING_JOB_ID should be"):
        names.shm_segment_names(job_id, 0)
    with pytest.raises(ValueError, match="RING_JOB_ID should be"):
        names.remove_job_shm(job_id)


@pytest.mark.parametrize("rank", [-1, True, 1.0, "0"])
def test_shm_names_refuse_a_bad_rank(rank):
    with pytest.raises(ValueError, match="rank should be a non-negative integer"):
        names.shm_segment_names("abc", rank)


@pytest.mark.skipif(not os.path.isdir(names.SHM_DIR), reason="no /dev/shm")
def test_remove_job_shm_removes_that_job_only():
    job = "t" + secrets.token_hex(6)
    mine = [p for rank in (0, 1, 12) for p in names.shm_segment_paths(job, [rank])]
    others = [os.path.join(names.SHM_DIR, n) for n in (
        f"ring.{job}d.0",        # job "<job>d": the same text first
        f"ring.{job}d-c.0",
        f"ring.{job}.x",         # not a rank
        f"ring.{job}.01",        # not how the engine writes rank 1
        f"ring.{job}-cc.0",
        f"ring.x{job}.0",
    )]
    try:
        for path in mine + others:
            with open(path, "w") as f:
                f.write("segment")
        assert names.job_shm_paths(job) == sorted(mine)
        assert sorted(names.remove_job_shm(job)) == sorted(mine)
        assert not any(os.path.exists(p) for p in mine)
        assert all(os.path.exists(p) for p in others)
        assert names.remove_job_shm(job) == []
    finally:
        for path in mine + others:
            if os.path.exists(path):
                os.unlink(path)


# ---------------------------------------------------------------- worker variables
def test_worker_environment_writes_every_worker_variable_and_nothing_else():
    written = {k for k in _written() if k.startswith("RING_")}
    assert written == set(names.WORKER_VARIABLES)
    assert len(set(names.WORKER_VARIABLES)) == len(names.WORKER_VARIABLES)


def test_worker_environment_writes_horovods_names_with_the_same_values():
    written = _written()
    assert {k for k in written if k.startswith("HOROVOD_")} == set(names.HOROVOD_ALIASES)
    assert {k: written[k] for k in names.HOROVOD_ALIASES} == {
        "HOROVOD_RANK": "1", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2",
        "HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "2", "HOROVOD_HOSTNAME": "node7"}
    assert set(names.HOROVOD_ALIASES.values()) <= set(names.LAYOUT_VARIABLES)
    assert names.WORKER_VARIABLES_AND_ALIASES == names.WORKER_VARIABLES + tuple(names.HOROVOD_ALIASES)


def test_ringrun_environment_reads_what_worker_environment_writes():
    env = _Recording(_written())
    job = RingrunEnvironment(env)
    assert env.asked == set(names.LAYOUT_VARIABLES)
    assert (job.rank, job.size, job.local_rank, job.local_size, job.cross_rank, job.cross_size) == (1, 4, 1, 2, 0, 2)
    assert (job.rendezvous_address, job.secret, job.job_id, job.host_id) == (
        "127.0.0.1:29400", b"\x01" * 32, "abc", "node7")
    assert set(names.WORKER_VARIABLES) - set(names.LAYOUT_VARIABLES) == {names.START_TIMEOUT}


def test_init_reads_the_start_timeout_worker_environment_writes():
    from ring_strategy import basics
    from ring_strategy.exceptions import BadArgumentError

    with mock.patch.dict(os.environ, {names.START_TIMEOUT: _written(start_timeout=12.5)[names.START_TIMEOUT]}):
        assert basics._start_timeout() == 12.5
    with mock.patch.dict(os.environ, {names.START_TIMEOUT: "nan"}):
        with pytest.raises(BadArgumentError, match=names.START_TIMEOUT):
            basics._start_timeout()


def test_launcher_watch_reads_the_launcher_variables():
    from ring_strategy import launcher_watch

    env = _Recording({names.LAUNCHER_PIPE: "not-a-pipe", names.LAUNCHER_GRACE_SECONDS: "2.5"})
    assert launcher_watch._launcher_fd(env) is None
    assert launcher_watch._grace_seconds(env) == 2.5
    assert env.asked == {names.LAUNCHER_PIPE, names.LAUNCHER_GRACE_SECONDS}


def test_the_dynamic_timeline_value_is_the_engines():
    from ring_strategy import _native

    assert names.TIMELINE_DYNAMIC == _native.TIMELINE_DYNAMIC


def test_no_launcher_variable_is_an_engine_setting():
    from ring_strategy import _native

    settings = set()
    for name, alias, _default, _doc in _native.config_table():
        settings |= {name, alias} - {""}
    ours = set(names.WORKER_VARIABLES_AND_ALIASES) | {names.LAUNCHER_PIPE, names.LAUNCHER_GRACE_SECONDS, names.ADVERTISE_HOST}
    assert settings and not ours & settings, sorted(ours & settings)
