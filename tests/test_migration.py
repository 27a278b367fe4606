"""The migration guides' before/after pairs (examples/migration/, shown as
diffs in docs/migrate-*.md): each "after" script runs under ringrun -np 2 and
prints the weights its "before" script prints in one process. The torch
pairs train the same regression, so the DDP script in one process is their
shared reference (Lightning's own "before" runs too); the TensorFlow and
Keras pairs train it from zero weights against keras.distribution's script
in one process. Horovod cannot be installed here (torch 2.13, Keras 3): its
"before" scripts are checked by their diffs instead."""

from __future__ import annotations

import functools
import socket
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from tests.jobs import job_environment, run_ringrun
from tests.test_docs_site import site_hooks

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ROOT / "examples" / "migration"


def _weights(stdout: str) -> str:
    lines = [line.split("weights", 1)[1].split() for line in stdout.splitlines() if "weights " in line]
    assert len(lines) == 1, stdout
    return " ".join(lines[0])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_one_process(script: str, *args: str, env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(PAIRS / script), *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=job_environment(env, drop_ring=True))


def _weights_of(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    return _weights(out)


def _under_ringrun(script: str, **env: str) -> str:
    result = run_ringrun(2, [sys.executable, PAIRS / script], env={"TF_CPP_MIN_LOG_LEVEL": "2", **env}, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    return _weights(result.stdout)


@pytest.fixture(scope="module")
def reference() -> str:
    """ddp_before.py in one process (a world of one, without torchrun)."""
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "RANK": "0", "WORLD_SIZE": "1"}
    return _weights_of(_start_one_process("ddp_before.py", env=env))


def test_ddp_pair(reference: str) -> None:
    assert _under_ringrun("ddp_after.py") == reference


def _only_the_import_changes(before: str, after: str, old: str, new: str) -> None:
    diff = [line for line in site_hooks().migration_diff(before, after).splitlines() if line[:1] in "+-"]
    assert diff == [f"--- {before}", f"+++ {after}", f"-import {old} as hvd", f"+import {new} as hvd"], diff


def test_horovod_torch_pair(reference: str) -> None:
    _only_the_import_changes("horovod_torch_before.py", "horovod_torch_after.py", "horovod.torch", "ring_strategy.torch")
    assert _under_ringrun("horovod_torch_after.py") == reference


@pytest.fixture(scope="module")
def keras_reference() -> Callable[[], str]:
    """The weights keras_distribution_before.py prints in one process on JAX; the script starts
    at once (it runs beside the jobs) and is waited for at the first call."""
    proc = _start_one_process("keras_distribution_before.py", env={"KERAS_BACKEND": "jax"})
    return functools.cache(lambda: _weights_of(proc))


def test_keras_pairs(keras_reference: Callable[[], str]) -> None:
    """keras.distribution's script and Horovod's Keras script both become keras_after.py."""
    _only_the_import_changes("horovod_keras_before.py", "keras_after.py", "horovod.tensorflow.keras",
                             "ring_strategy.keras")
    after = _under_ringrun("keras_after.py", KERAS_BACKEND="tensorflow")
    assert after == keras_reference()


def test_horovod_tensorflow_pair(keras_reference: Callable[[], str]) -> None:
    _only_the_import_changes("horovod_tensorflow_before.py", "horovod_tensorflow_after.py", "horovod.tensorflow",
                             "ring_strategy.tensorflow")
    assert _under_ringrun("horovod_tensorflow_after.py") == keras_reference()


# 9 s of make test's budget: slow-marked (pytest -m slow); tests/lightning/test_lightning.py
# runs Lightning under ringrun there.
@pytest.mark.slow
def test_lightning_pair(reference: str) -> None:
    before = _start_one_process("lightning_ddp_before.py", "1")  # beside the ringrun job: mostly imports
    try:
        after = _under_ringrun("lightning_ddp_after.py")
    finally:
        before_weights = _weights_of(before)
    assert before_weights == reference
    assert after == before_weights
