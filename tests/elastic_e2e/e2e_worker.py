"""What the elastic end-to-end training scripts (e2e_*_train.py) share:
their settings, the failure they inject, and the lines they print for
e2e_checks.py and tests/elastic/elastic_jobs.py to read.

Settings (environment): ``TRAIN_EPOCHS`` (default 3), ``TRAIN_COMMIT``
(default 3), ``TRAIN_SLEEP`` (seconds per step, default 0.02),
``TRAIN_FAIL`` = ``WORKER:STEP:MODE`` (the worker numbered WORKER, at
global step STEP, ``sigkill``\\ s or ``stop``\\ s (SIGSTOP) itself, or
``raise``\\ s), ``TRAIN_PROGRESS`` (a file rank 0 rewrites after every step
with ``STEP SIZE``).

Lines (ringrun prefixes each with ``[worker number]``): ``world G worker W
pid P rank R size S at T`` and ``synced world G rank R step S params HEX``
at every entry of the training function, ``caught CLS at T`` when the loop
restores the commit, ``first step world G at T`` (the first step after a
reset), ``victim worker W pid P failing at T``, ``trained world G epoch E
step S idx I,J,...`` (this rank's samples of step S), ``commit step S epoch
E at T`` (rank 0, before each commit), and at the end ``resets S,...``,
``steps run N`` and ``done worker W rank R steps S params HEX``. HEX: the
parameters' float32 bytes.
"""

from __future__ import annotations

import os
import re
import signal
import time
from typing import Any, Iterable, List

__all__ = ["Trace", "error_name"]


def error_name(error: BaseException) -> str:
    """The class of the error the elastic loop caught; a framework that ran
    the collective in its graph hands it over wrapped (TensorFlow:
    ``UnknownError: ... PeerFailureError: ...``)."""
    from ring_strategy.exceptions import HorovodInternalError

    wrapped = re.search(r"\b(\w+Error): ", str(error))
    return type(error).__name__ if isinstance(error, HorovodInternalError) or not wrapped else wrapped[1]


class Trace:
    """A script's settings and lines (see the module's docstring).

    Args:
        hvd: The front end (its ``rank()`` and ``size()`` are read when a line is printed).
    """

    def __init__(self, hvd: Any) -> None:
        self.hvd = hvd
        self.epochs = int(os.environ.get("TRAIN_EPOCHS", "3"))
        self.commit_every = int(os.environ.get("TRAIN_COMMIT", "3"))
        self.pause = float(os.environ.get("TRAIN_SLEEP", "0.02"))
        self.fail_worker, fail_step, self.fail_mode = (os.environ.get("TRAIN_FAIL", "") or "none:-1:none").split(":")
        self.fail_step = int(fail_step)
        self.progress = os.environ.get("TRAIN_PROGRESS", "")
        self.worker = os.environ.get("RING_ELASTIC_WORKER", os.environ.get("RING_RANK", "0"))
        self.steps_run = 0
        self.resets: List[int] = []
        self._first = False

    @staticmethod
    def world() -> int:
        from ring_strategy import basics

        return basics._env().world_generation or 0  # 0: not an elastic job

    def entered(self, step: int, params: str) -> None:
        """The training function starts (again) at ``step`` with ``params``."""
        print(f"world {self.world()} worker {self.worker} pid {os.getpid()} rank {self.hvd.rank()} "
              f"size {self.hvd.size()} at {time.time():.3f}", flush=True)
        print(f"synced world {self.world()} rank {self.hvd.rank()} step {step} params {params}", flush=True)

    def fail_here(self, step: int) -> None:
        """Fails as ``TRAIN_FAIL`` asks, if this worker is to fail at ``step``."""
        if self.fail_worker == self.worker and step == self.fail_step:
            print(f"victim worker {self.worker} pid {os.getpid()} failing at {time.time():.3f}", flush=True)
            if self.fail_mode in ("sigkill", "stop"):
                os.kill(os.getpid(), signal.SIGKILL if self.fail_mode == "sigkill" else signal.SIGSTOP)
            raise RuntimeError("the training script failed")

    def caught(self, error: BaseException) -> None:
        """The loop restores the commit after ``error``."""
        print(f"caught {error_name(error)} at {time.time():.3f}", flush=True)

    def reset(self, step: int) -> None:
        """A reset callback: the state stands at ``step``."""
        self.resets.append(step)
        self._first = True

    def trained(self, epoch: int, step: int, idx: Iterable[int]) -> None:
        """Step ``step`` of ``epoch`` trained on this rank's samples ``idx``."""
        self.steps_run += 1
        print(f"trained world {self.world()} epoch {epoch} step {step} idx {','.join(str(int(i)) for i in idx)}",
              flush=True)
        if self._first:
            print(f"first step world {self.world()} at {time.time():.3f}", flush=True)
            self._first = False
        if self.progress and self.hvd.rank() == 0:
            with open(self.progress + ".tmp", "w") as f:
                f.write(f"{step + 1} {self.hvd.size()}\n")
            os.replace(self.progress + ".tmp", self.progress)
        time.sleep(self.pause)

    def commit(self, step: int, epoch: int) -> None:
        """Rank 0 is about to commit after ``step`` steps, in ``epoch``."""
        if self.hvd.rank() == 0:
            print(f"commit step {step} epoch {epoch} at {time.time():.3f}", flush=True)

    def finished(self, steps: int, params: str) -> None:
        print(f"resets {','.join(map(str, self.resets))}", flush=True)
        print(f"steps run {self.steps_run}", flush=True)
        print(f"done worker {self.worker} rank {self.hvd.rank()} steps {steps} params {params}", flush=True)
