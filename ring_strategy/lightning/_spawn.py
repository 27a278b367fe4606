"""Self-launch: the first process of ``python train.py`` starts the others.

Lightning's own subprocess launcher runs the script again once per extra
device; this module does the same for ring, but gives each copy the ``RING_*``
environment that ``ringrun`` would have given it. The first process becomes
rank 0: it hosts the rendezvous store on loopback for the job's lifetime, with
a fresh secret and job id, and puts its own ``RING_*`` variables into
``os.environ`` so that ``ring_strategy.init()`` (and any later ``Trainer`` in
the same script) sees a job that is already running. Every rank, rank 0
included, computes with its share of the host's CPUs, as under ringrun
(:mod:`ring_strategy.runner.threads`); rank 0 says once what it chose.

At exit rank 0 ends the engine (so that no child can wait for it forever),
waits for its children, stops the store and removes any shared-memory segment
a crashed worker left behind. Nothing here imports torch or Lightning.
"""

from __future__ import annotations

import atexit
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
from typing import List, Optional, Sequence

from ring_strategy import _contracts as names
from ring_strategy.runner import threads
from ring_strategy.runner.store import StoreServer
from ring_strategy.runner.worker_env import worker_environment

__all__ = ["child_command", "is_running", "signal_workers", "start_workers"]

# Seconds rank 0 waits at exit for its children before it stops them.
_EXIT_WAIT_SECONDS = 60.0
_TERM_WAIT_SECONDS = 5.0


class _Job:
    """The children started by this process and the store it hosts."""

    def __init__(self, server: StoreServer, job_id: str, procs: List[subprocess.Popen]) -> None:
        self.server = server
        self.job_id = job_id
        self.procs = procs
        self.finished = False

    def finish(self) -> None:
        """Ends the job; called once, at interpreter exit."""
        if self.finished:
            return
        self.finished = True
        # Leave the engine first: children blocked on rank 0 then fail
        # instead of waiting, and those that are done simply exit.
        basics = sys.modules.get("ring_strategy.basics")
        if basics is not None:
            try:
                basics.shutdown()
            except Exception:  # pragma: no cover - best effort at exit
                pass
        failed = []
        for rank, proc in enumerate(self.procs, start=1):
            try:
                code = proc.wait(timeout=_EXIT_WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    code = proc.wait(timeout=_TERM_WAIT_SECONDS)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    code = proc.wait()
            if code != 0:
                failed.append(f"rank {rank} exited with code {code}")
        if failed:
            print("ring_strategy.lightning: " + "; ".join(failed), file=sys.stderr, flush=True)
        self.server.stop()
        names.remove_job_shm(self.job_id)


_job: Optional[_Job] = None
_lock = threading.Lock()


def child_command() -> List[str]:
    """The command line that runs this script again, as ``python`` was given it.

    Returns:
        ``[python, script, args...]``, or ``[python, -m, module, args...]`` when
        the script was started with ``python -m``.
    """
    import __main__

    spec = getattr(__main__, "__spec__", None)
    if spec is not None and spec.name:
        return [sys.executable, "-m", spec.name, *sys.argv[1:]]
    main_file = getattr(__main__, "__file__", None)
    if not main_file:
        raise RuntimeError(
            "RingStrategy cannot start the other workers of an interactive session: "
            "run the code as a script (python train.py) or under ringrun"
        )
    return [sys.executable, os.path.abspath(main_file), *sys.argv[1:]]


def is_running() -> bool:
    """True when this process has started a job with :func:`start_workers`."""
    return _job is not None


def start_workers(size: int, command: Optional[Sequence[str]] = None, start_timeout: float = 300.0) -> None:
    """Makes this process rank 0 of a single-host job of ``size`` and starts ranks 1..size-1.

    Args:
        size: The number of processes in the job, this one included.
        command: What each child runs; the current script again by default.
        start_timeout: Seconds every rank may take to reach the rendezvous.

    Raises:
        RuntimeError: If this process already belongs to a job.
    """
    global _job
    with _lock:
        if _job is not None or names.RANK in os.environ:
            raise RuntimeError("this process already belongs to a ring job; it cannot start another")
        cmd = list(command) if command is not None else child_command()
        secret = secrets.token_bytes(32)
        server = StoreServer(secret)
        server.start()
        job_id = "pl-" + secrets.token_hex(8)
        hostname = socket.gethostname()

        def env_of(rank: int) -> dict:
            env = worker_environment(
                dict(os.environ), rank=rank, size=size, rendezvous_address=server.address,
                secret=secret, job_id=job_id, start_timeout=start_timeout, hostname=hostname,
            )
            # Every rank writes straight to this console: Python's own line
            # buffering keeps each line whole, unbuffered writes would not.
            if "PYTHONUNBUFFERED" not in os.environ:
                env.pop("PYTHONUNBUFFERED", None)
            env.update(threads.thread_variables(env, size))
            return env

        procs: List[subprocess.Popen] = []
        try:
            for rank in range(1, size):
                procs.append(subprocess.Popen(cmd, env=env_of(rank)))
        except BaseException:
            for proc in procs:
                proc.kill()
                proc.wait()
            server.stop()
            raise
        own = env_of(0)
        os.environ.update({k: own[k] for k in names.WORKER_VARIABLES_AND_ALIASES})
        print(f"ring_strategy.lightning: {threads.describe(dict(os.environ), size)}", file=sys.stderr, flush=True)
        threads.apply_here(size)
        _job = _Job(server, job_id, procs)
        atexit.register(_job.finish)


def signal_workers(signum: int = signal.SIGTERM) -> None:
    """Sends ``signum`` to every child that is still running."""
    job = _job
    if job is None:
        return
    for proc in job.procs:
        if proc.poll() is None:
            proc.send_signal(signum)
