"""``ringrun``: start N worker processes of one job on this host.

Usage::

    ringrun -np 2 python train.py --epochs 3
    ringrun -np 4 -H localhost:4 --start-timeout 120 python train.py

ringrun makes a fresh job secret and job id, serves the rendezvous store on
loopback, and starts the workers, each in its own process group, with its
place in the job in ``RING_*`` environment variables (the secret travels only
in the environment, never on a command line). Every line a worker prints is
prefixed with ``[rank]``. When a worker fails, the others are terminated
(SIGTERM, then SIGKILL after a grace period) and ringrun exits with the failing
worker's code (128 + N for a signal N). SIGINT or SIGTERM to ringrun terminate
all workers the same way, and ringrun exits with 130 or 143.
"""

from __future__ import annotations

import argparse
import glob
import os
import queue
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Dict, List, Optional, Sequence, Tuple

from ring_strategy.runner.hosts import is_local_host, parse_hosts
from ring_strategy.runner.store import StoreServer

__all__ = ["build_parser", "main", "worker_environment"]

DEFAULT_START_TIMEOUT_SECONDS = 60.0
DEFAULT_GRACE_SECONDS = 5.0
# Longest line piece forwarded at once; longer lines are split.
_MAX_LINE_BYTES = 64 * 1024
# The engine names its shared-memory segments /dev/shm/ring.<job_id>[-suffix].<rank>
_SHM_PATTERN = "/dev/shm/ring.{job_id}*"


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of ``ringrun``."""
    parser = argparse.ArgumentParser(
        prog="ringrun",
        usage="%(prog)s -np N [-H localhost:N] [--start-timeout S] [--grace-period S] [-v] COMMAND...",
        description="Run a ring data-parallel job: N copies of COMMAND, one per rank.",
        epilog="Example: ringrun -np 2 python train.py",
    )
    parser.add_argument(
        "-np", "--num-proc", dest="np", type=int, metavar="N",
        help="number of worker processes (default: the slots given by -H)",
    )
    parser.add_argument(
        "-H", "--hosts", metavar="HOST:SLOTS",
        help="hosts and their slots, e.g. localhost:4 (only this host is supported yet)",
    )
    parser.add_argument(
        "--start-timeout", type=float, metavar="S", default=None,
        help="seconds the workers may take to find each other at init "
        f"(default: RING_START_TIMEOUT or {DEFAULT_START_TIMEOUT_SECONDS:g}); "
        "passed to them as RING_START_TIMEOUT",
    )
    parser.add_argument(
        "--grace-period", type=float, metavar="S", default=DEFAULT_GRACE_SECONDS,
        help="seconds between SIGTERM and SIGKILL when workers are stopped "
        f"(default: {DEFAULT_GRACE_SECONDS:g})",
    )
    parser.add_argument(
        "--timeline-filename", metavar="PATH",
        help="rank 0 writes a Chrome trace of every tensor's phases to PATH (sets RING_TIMELINE)",
    )
    parser.add_argument(
        "--timeline-mark-cycles", action="store_true",
        help="mark every cycle of the engine in the timeline (sets RING_TIMELINE_MARK_CYCLES=1)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="print what ringrun does",
    )
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="COMMAND...",
        help="the program each worker runs, with its arguments",
    )
    return parser


def worker_environment(
    base: Dict[str, str],
    *,
    rank: int,
    size: int,
    rendezvous_address: str,
    secret: bytes,
    job_id: str,
    start_timeout: float,
    hostname: str,
) -> Dict[str, str]:
    """Builds the environment of one worker on a single-host job.

    Args:
        base: The environment to start from (ringrun's own).
        rank: The worker's rank.
        size: The number of workers.
        rendezvous_address: ``host:port`` of the rendezvous store.
        secret: The job secret.
        job_id: The job id.
        start_timeout: Seconds the workers may take to find each other.
        hostname: This host's name.

    Returns:
        A new environment mapping.
    """
    env = dict(base)
    env.update(
        RING_RANK=str(rank),
        RING_SIZE=str(size),
        RING_LOCAL_RANK=str(rank),
        RING_LOCAL_SIZE=str(size),
        RING_CROSS_RANK="0",
        RING_CROSS_SIZE="1",
        RING_RENDEZVOUS_ADDR=rendezvous_address,
        RING_SECRET=secret.hex(),
        RING_JOB_ID=job_id,
        RING_HOSTNAME=hostname,
        RING_START_TIMEOUT=f"{start_timeout:g}",
        # Prompt, whole lines from Python workers (and any Python they start).
        PYTHONUNBUFFERED="1",
    )
    return env


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _describe(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name} (exit code {128 - returncode})"
    return f"exited with code {returncode}"


class _Output:
    """Forwards workers' output line by line, each line prefixed by its rank."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: List[threading.Thread] = []

    def forward(self, src: IO[bytes], dst: IO[bytes], rank: int) -> None:
        thread = threading.Thread(
            target=self._pump, args=(src, dst, f"[{rank}] ".encode()),
            name=f"ringrun-out-{rank}", daemon=True,
        )
        thread.start()
        self._threads.append(thread)

    def _pump(self, src: IO[bytes], dst: IO[bytes], prefix: bytes) -> None:
        try:
            while True:
                line = src.readline(_MAX_LINE_BYTES)
                if not line:
                    return
                if not line.endswith(b"\n"):
                    line += b"\n"
                with self._lock:
                    try:
                        dst.write(prefix + line)
                        dst.flush()
                    except (OSError, ValueError):
                        pass  # our stdout is gone; keep draining so workers never block
        finally:
            src.close()

    def join(self, timeout: float) -> None:
        """Waits for the output to drain; a grandchild may hold a pipe open."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))


class _TextAsBinary:
    """Writes bytes to a text stream that has no binary buffer (e.g. a StringIO)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, data: bytes) -> None:
        self._stream.write(data.decode("utf-8", "replace"))

    def flush(self) -> None:
        self._stream.flush()


def _binary(stream: IO[str]) -> IO[bytes]:
    buffer = getattr(stream, "buffer", None)
    return buffer if buffer is not None else _TextAsBinary(stream)  # type: ignore[return-value]


def _log(message: str) -> None:
    try:
        sys.stderr.write(f"ringrun: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class _Job:
    """Runs the workers of one job and decides ringrun's exit code."""

    def __init__(self, command: List[str], np: int, start_timeout: float,
                 grace: float, verbose: bool) -> None:
        self.command = command
        self.np = np
        self.start_timeout = start_timeout
        self.grace = grace
        self.verbose = verbose
        self.secret = secrets.token_bytes(32)
        self.job_id = secrets.token_hex(8)
        self.procs: Dict[int, subprocess.Popen] = {}
        self.events: "queue.SimpleQueue[Tuple[str, int, int]]" = queue.SimpleQueue()
        self.output = _Output()

    def run(self) -> int:
        store = StoreServer(self.secret, host="127.0.0.1")
        old_handlers = {}
        try:
            store.start()
            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    old_handlers[sig] = signal.signal(sig, self._on_signal)
            if self.verbose:
                _log(f"job {self.job_id}: {self.np} workers, rendezvous at {store.address}")
            code = self._start_all(store.address)
            if code is None:
                code = self._supervise()
            return code
        finally:
            self._kill_all(signal.SIGKILL, only_live=True)
            self.output.join(timeout=2.0)
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
            store.stop()
            self._remove_shm()

    def _on_signal(self, signum: int, frame: object) -> None:
        self.events.put(("signal", signum, 0))

    def _start_all(self, address: str) -> Optional[int]:
        hostname = socket.gethostname()
        for rank in range(self.np):
            env = worker_environment(
                dict(os.environ), rank=rank, size=self.np, rendezvous_address=address,
                secret=self.secret, job_id=self.job_id, start_timeout=self.start_timeout,
                hostname=hostname,
            )
            try:
                proc = subprocess.Popen(
                    self.command, env=env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    start_new_session=True,  # own process group: killpg reaches the tree
                )
            except OSError as e:
                _log(f"cannot start {self.command[0]!r} for rank {rank}: {e.strerror or e}")
                self._stop_workers()
                return 127 if isinstance(e, FileNotFoundError) else 126
            self.procs[rank] = proc
            assert proc.stdout is not None and proc.stderr is not None
            self.output.forward(proc.stdout, _binary(sys.stdout), rank)
            self.output.forward(proc.stderr, _binary(sys.stderr), rank)
            threading.Thread(
                target=self._wait, args=(rank, proc), name=f"ringrun-wait-{rank}", daemon=True
            ).start()
        return None

    def _wait(self, rank: int, proc: subprocess.Popen) -> None:
        self.events.put(("exit", rank, proc.wait()))

    def _supervise(self) -> int:
        """Collects worker exits and signals until every worker has exited."""
        running = set(self.procs)
        code: Optional[int] = None
        kill_at: Optional[float] = None
        while running:
            timeout = 0.5 if kill_at is None else max(0.0, min(0.5, kill_at - time.monotonic()))
            try:
                kind, a, b = self.events.get(timeout=timeout)
            except queue.Empty:
                if kill_at is not None and time.monotonic() >= kill_at:
                    if self.verbose:
                        _log("grace period over: sending SIGKILL")
                    self._kill_all(signal.SIGKILL, only_live=True)
                    kill_at = None
                continue
            if kind == "exit":
                rank, returncode = a, b
                running.discard(rank)
                if returncode != 0 and code is None:
                    code = _exit_code(returncode)
                    _log(f"rank {rank} {_describe(returncode)}; "
                         + ("terminating the other workers" if running else "job failed"))
                    if running:
                        self._kill_all(signal.SIGTERM)
                        kill_at = time.monotonic() + self.grace
            elif kind == "signal":
                signum = a
                if code is None:
                    code = 128 + signum
                    _log(f"received {signal.Signals(signum).name}; terminating the workers")
                    self._kill_all(signal.SIGTERM)
                    kill_at = time.monotonic() + self.grace
                else:  # a second signal: no more patience
                    self._kill_all(signal.SIGKILL)
                    kill_at = None
        if code is not None:
            # Reap what the workers may have left behind in their groups.
            self._kill_all(signal.SIGKILL)
        return 0 if code is None else code

    def _stop_workers(self) -> None:
        """Stops already started workers (used when a later one fails to start)."""
        self._kill_all(signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        for proc in self.procs.values():
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self._kill_all(signal.SIGKILL)
        for proc in self.procs.values():
            proc.wait()

    def _kill_all(self, sig: int, only_live: bool = False) -> None:
        for proc in self.procs.values():
            if only_live and proc.poll() is not None:
                continue
            try:
                os.killpg(proc.pid, sig)  # the group id is the worker's pid
            except (ProcessLookupError, PermissionError):
                pass

    def _remove_shm(self) -> None:
        for path in glob.glob(_SHM_PATTERN.format(job_id=self.job_id)):
            try:
                os.unlink(path)
            except OSError:
                pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs ``ringrun``.

    Args:
        argv: The arguments, without the program name; defaults to ``sys.argv[1:]``.

    Returns:
        The exit code: 0 when every worker succeeded, else the first failing
        worker's code (128 + N for a signal N), or 128 + N when ringrun itself
        received signal N.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("missing the command to run, e.g. ringrun -np 2 python train.py")

    np_ = args.np
    if args.hosts is not None:
        try:
            hosts = parse_hosts(args.hosts)
        except ValueError as e:
            parser.error(f"-H: {e}")
        remote = [h.hostname for h in hosts if not is_local_host(h.hostname)]
        if remote or len(hosts) > 1:
            parser.error(
                f"-H {args.hosts!r}: multi-host jobs are not supported yet; "
                "ringrun runs all workers on this host (use -H localhost:N)"
            )
        slots = hosts[0].slots
        if np_ is None:
            np_ = slots
        elif np_ > slots:
            parser.error(f"-np {np_} is more than the {slots} slots given by -H {args.hosts!r}")
    if np_ is None:
        parser.error("the number of workers is required: -np N")
    if np_ < 1:
        parser.error(f"-np should be a positive integer. Got: {np_}")

    start_timeout = args.start_timeout
    if start_timeout is None:
        raw = os.environ.get("RING_START_TIMEOUT", os.environ.get("HOROVOD_START_TIMEOUT"))
        try:
            start_timeout = float(raw) if raw else DEFAULT_START_TIMEOUT_SECONDS
        except ValueError:
            parser.error(f"RING_START_TIMEOUT should be a number of seconds. Got: {raw!r}")
    if start_timeout <= 0:
        parser.error(f"--start-timeout should be positive. Got: {start_timeout:g}")
    if args.grace_period < 0:
        parser.error(f"--grace-period should not be negative. Got: {args.grace_period:g}")

    if args.timeline_filename:
        # The workers inherit ringrun's environment; an absolute path keeps
        # the file where the user asked whatever directory rank 0 runs in.
        os.environ["RING_TIMELINE"] = os.path.abspath(args.timeline_filename)
    if args.timeline_mark_cycles:
        os.environ["RING_TIMELINE_MARK_CYCLES"] = "1"
    job = _Job(command, np_, start_timeout, args.grace_period, args.verbose)
    return job.run()


if __name__ == "__main__":
    sys.exit(main())
