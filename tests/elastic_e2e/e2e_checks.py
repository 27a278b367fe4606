"""What the elastic end-to-end tests check in a finished job, beyond
tests/elastic/elastic_jobs.py's readings: commits, resets, the samples each
step trained, and detection and recovery times."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np

from tests.elastic.elastic_jobs import DETECT_SECONDS, RECOVER_SECONDS, ElasticJob, Finished, clean, params, timings

__all__ = ["HOSTS", "DETECT_SECONDS", "RECOVER_SECONDS", "ElasticJob", "Finished", "added_host", "check_added",
           "check_lost_one_of_three", "clean", "commits", "every_sample_once", "finished_equal", "pids",
           "printed_reference", "resets", "steps_run", "timings", "trained"]

HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]

_COMMIT = re.compile(r"^\[(\d+)\] commit step (\d+) epoch (\d+) at ([\d.]+)$", re.M)
_RESETS = re.compile(r"^\[(\d+)\] resets ([\d,]*)$", re.M)
_STEPS_RUN = re.compile(r"^\[(\d+)\] steps run (\d+)$", re.M)
_REFERENCE = re.compile(r"^\[\d+\] reference params ([0-9a-f]+)$", re.M)
_TRAINED = re.compile(r"^\[(\d+)\] trained world (\d+) epoch (\d+) step (\d+) idx ([\d,]+)$", re.M)


def commits(run: Finished) -> List[Tuple[int, int, float]]:
    """Rank 0's commits, in order: step, epoch, time (every worker that was rank 0 prints its own)."""
    return [(int(m[2]), int(m[3]), float(m[4])) for m in _COMMIT.finditer(run.output)]


def resets(run: Finished) -> Dict[int, List[int]]:
    """The step each worker's state stood at after each of its resets, by worker."""
    return {int(m[1]): [int(s) for s in m[2].split(",") if s] for m in _RESETS.finditer(run.output)}


def steps_run(run: Finished) -> Dict[int, int]:
    """Steps each finished worker trained, redone ones included."""
    return {int(m[1]): int(m[2]) for m in _STEPS_RUN.finditer(run.output)}


def trained(run: Finished) -> Dict[Tuple[int, int], Dict[int, List[List[int]]]]:
    """``{(epoch, step): {world: [each rank's samples]}}``."""
    found: Dict[Tuple[int, int], Dict[int, List[List[int]]]] = {}
    for m in _TRAINED.finditer(run.output):
        by_world = found.setdefault((int(m[3]), int(m[4])), {})
        by_world.setdefault(int(m[2]), []).append([int(i) for i in m[5].split(",")])
    return found


def every_sample_once(run: Finished, samples: int, epochs: int, steps_per_epoch: int) -> None:
    """Each step was trained last in one world, by all of its ranks, on
    disjoint samples; over an epoch those are every sample once (steps
    rolled back and trained again count once, in the world that redid them)."""
    steps = trained(run)
    assert sorted(steps) == [(s // steps_per_epoch, s) for s in range(epochs * steps_per_epoch)], \
        f"steps trained: {sorted(steps)}\n{run.tail()}"
    seen: Dict[int, List[int]] = {}
    for (epoch, step), by_world in steps.items():
        world = max(by_world)
        parts = by_world[world]
        size = len(run.worlds().get(world, [None])) if world else len(parts)
        assert len(parts) == size, f"step {step} of world {world}: {len(parts)} of {size} ranks trained it"
        seen.setdefault(epoch, []).extend(i for part in parts for i in part)
    for epoch, indices in seen.items():
        assert sorted(indices) == list(range(samples)), f"epoch {epoch}: samples {sorted(indices)}"


def finished_equal(run: Finished, steps: int, reference: np.ndarray) -> None:
    """Every finished worker trained ``steps`` steps to bitwise the same
    parameters, within 1e-5 of ``reference`` (one process on the global batches)."""
    done = run.done()
    assert done and {s for _, s, _ in done.values()} == {steps}, run.tail()
    values = {hex_ for _, _, hex_ in done.values()}
    assert len(values) == 1, f"ranks disagree: {done}\n{run.tail()}"
    np.testing.assert_allclose(params(values.pop()), reference, rtol=0, atol=1e-5)


def printed_reference(run: Finished) -> np.ndarray:
    """The one-process parameters a worker printed (``reference params HEX``)."""
    m = _REFERENCE.search(run.output)
    assert m, run.tail()
    return params(m[1])


def pids(run: Finished) -> Dict[int, List[int]]:
    """Each worker's pid at each entry of its training function, in order."""
    found: Dict[int, List[int]] = {}
    for line in run.joined():
        found.setdefault(int(line["worker"]), []).append(int(line["pid"]))
    return found


def check_lost_one_of_three(run: Finished, fail_step: int, commit_every: int, steps: int, what: str) -> None:
    """Acceptance 1 on a job of 3 workers on :data:`HOSTS` whose worker 1
    failed at step ``fail_step`` of ``steps``: it exits 0; the failed host is
    blacklisted and gets no new worker; the survivors keep their processes,
    reset once, back to the last commit, and train again at most one commit
    interval; detection and recovery times (:func:`timings`); nothing left behind."""
    assert run.returncode == 0, run.tail()
    assert run.worlds() == {1: list(zip([0, 1, 2], HOSTS)), 2: [(0, HOSTS[0]), (2, HOSTS[2])]}, run.tail()
    assert sorted(run.started()) == [0, 1, 2], "the failed host got a new worker:\n" + run.tail()
    assert f"host {HOSTS[1]} is blacklisted for good" in run.output, run.tail()
    for w in (0, 2):
        assert pids(run)[w] == [run.started()[w][1]] * 2, f"worker {w} changed process: {pids(run)}"
    committed = fail_step - fail_step % commit_every
    assert resets(run) == {0: [committed], 2: [committed]}, resets(run)
    assert set(run.synced_steps(2).values()) == {committed}, run.synced_steps(2)
    redone = {w: n - steps for w, n in steps_run(run).items()}
    assert redone == {0: fail_step - committed, 2: fail_step - committed}, redone
    assert max(redone.values()) <= commit_every, redone
    timings(run, [0, 2], 2, what)
    clean(run)


def added_host(tmp_path: Path, worker: Path, env: Dict[str, str], at_step: int) -> Tuple[Finished, float]:
    """A job of ``worker`` on two hosts; the third is listed once rank 0 has
    made ``at_step`` steps. Returns the finished job and when (``time.time()``)
    the discovery file changed."""
    job = ElasticJob(tmp_path, HOSTS[:2], ["-np", 2, "--max-np", 3], env=env, worker=worker)
    job.wait_progress(at_step, size=2, timeout=120)  # two workers importing a framework on a busy machine
    added_at = time.time()
    job.set_hosts(HOSTS)
    job.wait_progress(0, size=3, timeout=120)
    return job.finish(), added_at


def check_added(run: Finished, added_at: float, what: str) -> int:
    """Acceptance 3 on a job of :func:`added_host`: it exits 0; the third
    host's worker is in world 2, reset into at the first commit after
    discovery listed it; every rank holds rank 0's parameters after the
    sync. Prints how long that took; returns the step of that commit."""
    assert run.returncode == 0, run.tail()
    worlds = run.worlds()  # later worlds: ranks leaving one by one as they finish
    assert worlds[1] == list(zip([0, 1], HOSTS)) and worlds[2] == list(zip([0, 1, 2], HOSTS)), run.tail()
    synced = run.synced(2)
    assert sorted(synced) == [0, 1, 2] and len(set(synced.values())) == 1, f"world 2 sync: {synced}"
    assert "blacklisted" not in run.output and "caught" not in run.output, run.tail()
    (reset_step,) = set(sum(resets(run).values(), []))
    at = {step: t for step, _, t in commits(run)}
    training_at = max(j["at"] for j in run.joined() if j["world"] == 2)
    print(f"{what}: host added; the commit of step {reset_step} reset into world 2 {at[reset_step] - added_at:.3f} s "
          f"after the discovery file changed; every rank trained in world 2 {training_at - added_at:.3f} s after it")
    # Discovery runs every second and the workers watch for new worlds every
    # 0.5 s: a commit this much later (about 20 commits) would have seen world 2.
    missed = [t for step, t in at.items() if step < reset_step]
    assert not missed or missed[-1] - added_at < 4.0, sorted(at.items())
    return reset_step
