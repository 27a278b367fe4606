"""One run of a job: the rendezvous store, the workers on every host, and the
exit code.

Workers on this host are child processes, each in its own process group;
workers on other hosts run behind one ssh session per host
(:mod:`ring_strategy.runner.remote`). Both kinds report exits to one queue, so
the first failure, or a signal to ringrun, stops every worker of the job the
same way: SIGTERM, then SIGKILL after the grace period.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Tuple, Union

from ring_strategy import _contracts as names
from ring_strategy.environments.network import join_address, route_address
from ring_strategy.runner import threads
from ring_strategy.runner.bootstrap import interface_address
from ring_strategy.runner.hosts import HostRanks
from ring_strategy.runner.output import Output, log
from ring_strategy.runner.remote import RemoteWorkers, SshSettings, bootstrap_spec
from ring_strategy.runner.store import StoreServer
from ring_strategy.runner.worker_env import forwarded_environment, worker_environment

__all__ = ["Job", "JobPlan", "LocalWorkers"]

_Events = "queue.SimpleQueue[Tuple[str, int, int]]"

_noted = False


def note_threads(env: Dict[str, str], local_size: int, verbose: bool) -> None:
    """With --verbose, says once per ringrun what threads its workers here
    compute with (without, ringrun's stderr holds only the workers' lines)."""
    global _noted
    if verbose and not _noted:
        _noted = True
        log(threads.describe(env, local_size))


@dataclasses.dataclass
class JobPlan:
    """What ringrun was asked to run, checked and placed on hosts.

    Attributes:
        command: The workers' argv.
        hosts: The hosts that run workers, with their ranks.
        local: For each host, whether it is this machine (no ssh).
        size: The number of workers.
        start_timeout: Seconds the workers may take to find each other.
        grace: Seconds between SIGTERM and SIGKILL.
        verbose: Whether to say what happens.
        output_dir: ``--output-filename``: per-rank log directory, or None.
        ssh: How to reach remote hosts.
        interface: ``--network-interface``, or None.
    """

    command: List[str]
    hosts: List[HostRanks]
    local: List[bool]
    size: int
    start_timeout: float
    grace: float
    verbose: bool = False
    output_dir: Optional[str] = None
    ssh: SshSettings = dataclasses.field(default_factory=SshSettings)
    interface: Optional[str] = None

    @property
    def remote(self) -> bool:
        """Whether any host is reached over ssh."""
        return not all(self.local)


def exit_code(returncode: int) -> int:
    """A shell's exit code for ``Popen.returncode`` (128 + N for signal N)."""
    return 128 - returncode if returncode < 0 else returncode


def describe(returncode: int) -> str:
    """Words for ``Popen.returncode``: 'exited with code 3', 'was killed by SIGKILL ...'."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name} (exit code {128 - returncode})"
    return f"exited with code {returncode}"


class LocalWorkers:
    """Workers of one host started here as child processes.

    Args:
        command: The workers' argv.
        envs: Each rank's whole environment.
        output: Where their lines go.
        events: Receives ``("exit", rank, returncode)`` for each worker.
        grace: Seconds a worker whose ringrun is gone waits between SIGTERM
            and SIGKILL to itself.
    """

    def __init__(self, command: List[str], envs: Dict[int, Dict[str, str]], output: Output,
                 events: _Events, grace: float) -> None:
        self.command = command
        self.envs = envs
        self.output = output
        self.events = events
        self.grace = grace
        self.procs: Dict[int, subprocess.Popen] = {}

    def start(self) -> Optional[int]:
        """Starts every worker.

        Returns:
            None on success, else the exit code for ringrun (127: no such
            program, 126: cannot run it); the workers started so far keep running.
        """
        # Each worker inherits the read end of a pipe whose write end only
        # ringrun holds: if ringrun dies, even by SIGKILL, the workers read
        # end-of-file and stop themselves (ring_strategy.launcher_watch).
        watch_read, self._watch_write = os.pipe()
        try:
            return self._start_all(watch_read)
        finally:
            os.close(watch_read)  # the workers have their own copies

    def _start_all(self, watch_read: int) -> Optional[int]:
        # Descriptor and inode: a process that did not inherit the pipe may
        # have another file under the same number.
        pipe = f"{watch_read}:{os.fstat(watch_read).st_ino}"
        for rank, env in sorted(self.envs.items()):
            env = dict(env, **{names.LAUNCHER_PIPE: pipe, names.LAUNCHER_GRACE_SECONDS: repr(self.grace)})
            try:
                proc = subprocess.Popen(
                    self.command, env=env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(watch_read,),
                    start_new_session=True,  # own process group: killpg reaches the tree
                )
            except OSError as e:
                log(f"cannot start {self.command[0]!r} for rank {rank}: {e.strerror or e}")
                return 127 if isinstance(e, FileNotFoundError) else 126
            self.procs[rank] = proc
            assert proc.stdout is not None and proc.stderr is not None
            self.output.forward(proc.stdout, rank, "stdout")
            self.output.forward(proc.stderr, rank, "stderr")
            threading.Thread(
                target=self._wait, args=(rank, proc), name=f"ringrun-wait-{rank}", daemon=True
            ).start()
        return None

    def _wait(self, rank: int, proc: subprocess.Popen) -> None:
        self.events.put(("exit", rank, proc.wait()))

    def signal(self, sig: int, only_live: bool = False) -> None:
        """Sends ``sig`` to every worker's process group (what it started included).

        Args:
            sig: The signal.
            only_live: Skip workers that have exited (their groups may live on).
        """
        for proc in self.procs.values():
            if only_live and proc.poll() is not None:
                continue
            try:
                os.killpg(proc.pid, sig)  # the group id is the worker's pid
            except (ProcessLookupError, PermissionError):
                pass

    def wait(self, timeout: float) -> bool:
        """Waits for every worker to exit; True if they did within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return False
        return True

    def close(self) -> None:
        """Kills the workers still running."""
        self.signal(signal.SIGKILL, only_live=True)


_Group = Union[LocalWorkers, RemoteWorkers]


class Job:
    """Runs the workers of one job and decides ringrun's exit code.

    Args:
        plan: What to run where.
    """

    def __init__(self, plan: JobPlan) -> None:
        self.plan = plan
        self.secret = secrets.token_bytes(32)
        self.job_id = secrets.token_hex(8)
        self.groups: List[_Group] = []
        self.events: _Events = queue.SimpleQueue()
        self.output: Optional[Output] = None

    def run(self) -> int:
        """Runs the job to its end.

        Returns:
            ringrun's exit code.
        """
        store = StoreServer(self.secret, host=self._store_bind_host())
        old_handlers = {}
        try:
            self.output = Output(self.plan.size, self.plan.output_dir)
            store.start()
            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    old_handlers[sig] = signal.signal(sig, self._on_signal)
            address = self._rendezvous_address(store.address)
            if self.plan.verbose:
                log(f"job {self.job_id}: {self._describe()}, rendezvous at {address}")
            code = self._start_all(address)
            if code is None:
                code = self._supervise()
            return code
        finally:
            for group in self.groups:
                group.close()
            if self.output is not None:
                self.output.join(timeout=2.0)
                self.output.close()
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
            store.stop()
            names.remove_job_shm(self.job_id)  # what workers killed on this host left

    def _describe(self) -> str:
        """What runs, for ``--verbose``."""
        return f"{self.plan.size} workers on {len(self.plan.hosts)} host(s)"

    def _store_bind_host(self) -> str:
        """Loopback for a job on this machine only, else the interface's address or all."""
        if not self.plan.remote:
            return "127.0.0.1"
        if self.plan.interface:
            return interface_address(self.plan.interface)
        return "0.0.0.0"

    def _rendezvous_address(self, bound: str) -> str:
        """The store's address as every host should dial it."""
        port = bound.rpartition(":")[2]
        if not self.plan.remote:
            return bound
        if self.plan.interface:
            host = interface_address(self.plan.interface)
        else:
            first = next(h for h, here in zip(self.plan.hosts, self.plan.local) if not here)
            host = route_address(join_address(first.hostname, 22))
        return join_address(host, int(port))

    def _on_signal(self, signum: int, frame: object) -> None:
        self.events.put(("signal", signum, 0))

    def _environments(self, host: HostRanks, here: bool, base: Dict[str, str],
                      address: str) -> Dict[int, Dict[str, str]]:
        """Each rank's variables on ``host`` (this machine when ``here``), on top of ``base``."""
        one_host = len(self.plan.hosts) == 1
        envs = {}
        for local_rank, rank in enumerate(host.ranks):
            env = worker_environment(
                base, rank=rank, size=self.plan.size, rendezvous_address=address, secret=self.secret,
                job_id=self.job_id, start_timeout=self.plan.start_timeout,
                hostname=socket.gethostname() if one_host and here else host.hostname,
                local_rank=local_rank, local_size=host.count,
                cross_rank=host.cross_rank, cross_size=len(self.plan.hosts),
            )
            if not one_host and not self.plan.remote:
                env[names.ADVERTISE_HOST] = "127.0.0.1"  # "hosts" that are all this machine
            if here:  # another host's bootstrap gives its workers their share of its CPUs
                env.update(threads.thread_variables(env, host.count))
            envs[rank] = env
        if here and host.ranks:
            note_threads(base, host.count, self.plan.verbose)
        return envs

    def _start_all(self, address: str) -> Optional[int]:
        assert self.output is not None
        for host, here in zip(self.plan.hosts, self.plan.local):
            group: _Group
            if here:
                base = dict(os.environ)
                if self.plan.remote and self.plan.interface:
                    base[names.ADVERTISE_HOST] = interface_address(self.plan.interface)
                group = LocalWorkers(self.plan.command, self._environments(host, True, base, address),
                                     self.output, self.events, self.plan.grace)
            else:
                spec = bootstrap_spec(
                    command=self.plan.command, cwd=os.getcwd(), job_id=self.job_id, grace=self.plan.grace,
                    interface=self.plan.interface, env=forwarded_environment(os.environ),
                    workers=self._environments(host, False, {}, address),
                )
                group = RemoteWorkers(host.hostname, spec, self.plan.ssh, sys.executable, self.output,
                                      self.events, self.plan.start_timeout, self.plan.verbose)
            self.groups.append(group)
            code = group.start()
            if code is not None:
                self._stop_workers()
                return code
        return None

    def _supervise(self) -> int:
        """Collects worker exits and signals until every worker has exited."""
        running = set(range(self.plan.size))
        code: Optional[int] = None
        kill_at: Optional[float] = None
        while running:
            timeout = 0.5 if kill_at is None else max(0.0, min(0.5, kill_at - time.monotonic()))
            try:
                kind, a, b = self.events.get(timeout=timeout)
            except queue.Empty:
                if kill_at is not None and time.monotonic() >= kill_at:
                    if self.plan.verbose:
                        log("grace period over: sending SIGKILL")
                    self._kill_all(signal.SIGKILL, only_live=True)
                    kill_at = None
                continue
            if kind == "exit":
                rank, returncode = a, b
                running.discard(rank)
                if returncode != 0 and code is None:
                    code = exit_code(returncode)
                    log(f"rank {rank} {describe(returncode)}; "
                        + ("terminating the other workers" if running else "job failed"))
                    if running:
                        self._kill_all(signal.SIGTERM)
                        kill_at = time.monotonic() + self.plan.grace
            elif kind == "signal":
                signum = a
                if code is None:
                    code = 128 + signum
                    log(f"received {signal.Signals(signum).name}; terminating the workers")
                    self._kill_all(signal.SIGTERM)
                    kill_at = time.monotonic() + self.plan.grace
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
        deadline = time.monotonic() + self.plan.grace
        for group in self.groups:
            group.wait(max(0.0, deadline - time.monotonic()))
        self._kill_all(signal.SIGKILL)
        for group in self.groups:
            group.wait(self.plan.grace)

    def _kill_all(self, sig: int, only_live: bool = False) -> None:
        for group in self.groups:
            group.signal(sig, only_live)
