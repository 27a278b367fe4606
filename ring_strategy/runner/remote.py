"""Workers on other hosts, started over ssh.

One ssh session per remote host runs :mod:`ring_strategy.runner.bootstrap` in
the remote Python: ringrun writes the bootstrap's source, then the job spec
(with the secret and the workers' variables) to the session's stdin, so
nothing secret is ever on a command line, and keeps stdin open for the life of
the job. The bootstrap starts the host's workers and reports their output and
exits on stdout. Closing the session (ringrun exits or dies, the connection
drops) stops the remote workers: the bootstrap treats end of file as SIGTERM,
then SIGKILL after the grace period.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import queue
import shlex
import signal
import subprocess
import threading
from typing import IO, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from ring_strategy import _contracts as names
from ring_strategy.runner.output import MAX_LINE_BYTES, Output, log as _log

__all__ = ["REMOTE_LOADER", "RemoteWorkers", "SshSettings", "ssh_command"]

_BOOTSTRAP_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap.py")
# The thread rule, whose source the bootstrap runs on its host.
_THREADS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "threads.py")
#: The remote Python's program: read N, then N bytes of source, and run them.
REMOTE_LOADER = "import sys;exec(sys.stdin.buffer.read(int(sys.stdin.buffer.readline())))"
# Seconds ringrun waits for an ssh session to end after closing its stdin.
_CLOSE_SECONDS = 5.0


@dataclasses.dataclass(frozen=True)
class SshSettings:
    """How ringrun reaches remote hosts.

    Attributes:
        port: ``ssh -p``; None for ssh's default.
        identity_file: ``ssh -i``; None for ssh's default keys.
        connect_timeout: Seconds ssh may take to connect.
        extra_args: More ssh arguments, from ``RING_SSH_ARGS``.
    """

    port: Optional[int] = None
    identity_file: Optional[str] = None
    connect_timeout: float = 60.0
    extra_args: Tuple[str, ...] = ()


def ssh_command(host: str, settings: SshSettings, remote_command: str) -> List[str]:
    """Returns the argv of ``ssh`` running ``remote_command`` on ``host``.

    ssh never asks a question (``BatchMode``), accepts hosts it has not seen
    before (``StrictHostKeyChecking=no``, as ``horovodrun`` does) and gives up
    on a host that does not answer in ``connect_timeout`` seconds.

    Args:
        host: The host's name or address.
        settings: Port, key and further arguments.
        remote_command: The shell command line to run there.

    Returns:
        The argv.
    """
    cmd = [
        "ssh", "-T", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
        "-o", f"ConnectTimeout={max(1, math.ceil(settings.connect_timeout))}",
        "-o", "ServerAliveInterval=30",
    ]
    if settings.port is not None:
        cmd += ["-p", str(settings.port)]
    if settings.identity_file is not None:
        cmd += ["-i", settings.identity_file]
    cmd += list(settings.extra_args)
    cmd += [host, remote_command]
    return cmd


def remote_command(python: str, job_id: str) -> str:
    """The shell command that runs the bootstrap on a remote host.

    Args:
        python: The remote Python interpreter (ringrun's own path: hosts share
            their software layout).
        job_id: Shown in the remote process list, to tell jobs apart.

    Returns:
        A command line with nothing secret in it.
    """
    return " ".join([
        "exec", shlex.quote(python), "-u", "-c", shlex.quote(REMOTE_LOADER),
        "ringrun-bootstrap", shlex.quote(job_id),
    ])


class RemoteWorkers:
    """The workers of one remote host, behind one ssh session.

    Args:
        host: The host's name or address.
        spec: The bootstrap's job spec (see :mod:`ring_strategy.runner.bootstrap`).
        settings: How to reach the host.
        python: The remote Python interpreter.
        output: Where the workers' lines go.
        events: Receives ``("exit", rank, returncode)`` for each worker.
        start_timeout: Seconds the host may take to start its workers.
        verbose: Whether to say what happens.
    """

    def __init__(self, host: str, spec: Dict, settings: SshSettings, python: str, output: Output,
                 events: "queue.SimpleQueue[Tuple[str, int, int]]", start_timeout: float,
                 verbose: bool = False) -> None:
        self.host = host
        self.spec = spec
        self.settings = settings
        self.python = python
        self.output = output
        self.events = events
        self.start_timeout = start_timeout
        self.verbose = verbose
        self.ranks: List[int] = [w["rank"] for w in spec["workers"]]
        self._reported: Set[int] = set()
        self._started: Set[int] = set()
        self._proc: Optional[subprocess.Popen] = None
        self._stdin_lock = threading.Lock()
        self._threads: List[threading.Thread] = []
        self._timer: Optional[threading.Timer] = None

    def start(self) -> Optional[int]:
        """Opens the ssh session and sends the bootstrap and the spec.

        Returns:
            None when the session started, else the exit code for ringrun
            (127: no ssh program).
        """
        cmd = ssh_command(self.host, self.settings, remote_command(self.python, self.spec["job_id"]))
        if self.verbose:
            _log(f"host {self.host}: ranks {_ranks(self.ranks)} over: {shlex.join(cmd)}")
        try:
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True,  # a Ctrl-C on the terminal reaches ringrun, which stops the job
            )
        except OSError as e:
            _log(f"cannot start ssh for host {self.host}: {e.strerror or e}")
            return 127 if isinstance(e, FileNotFoundError) else 126
        with open(_BOOTSTRAP_PATH, "rb") as f:
            source = f.read()
        self._send(b"%d\n" % len(source) + source + json.dumps(self.spec).encode() + b"\n")
        assert self._proc.stdout is not None and self._proc.stderr is not None
        for target, args in ((self._read_reports, (self._proc.stdout,)),
                             (self._read_errors, (self._proc.stderr,))):
            thread = threading.Thread(target=target, args=args, name=f"ringrun-ssh-{self.host}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._timer = threading.Timer(self.start_timeout, self._check_started)
        self._timer.daemon = True
        self._timer.start()
        return None

    def signal(self, sig: int, only_live: bool = False) -> None:
        """Asks the host to send ``sig`` (SIGTERM or SIGKILL) to its workers.

        Args:
            sig: The signal; anything but SIGKILL means SIGTERM and a grace period.
            only_live: Ignored: the host signals only workers still running.

        A host that has not ended its session ``_CLOSE_SECONDS`` after a
        SIGKILL is taken for unreachable (a cut link, a frozen machine): its
        ssh session is closed, which reports its workers as failed, so the
        job ends instead of waiting for a host that cannot answer.
        """
        self._send(b"KILL\n" if sig == signal.SIGKILL else b"TERM\n")
        if sig == signal.SIGKILL and self._proc is not None and self._proc.poll() is None:
            timer = threading.Timer(_CLOSE_SECONDS, self._cut_off)
            timer.daemon = True
            timer.start()

    def remove_at_exit(self, paths_json: str) -> None:
        """Asks the host to remove the files of the JSON list ``paths_json``
        (shared-memory segments) once its workers have exited."""
        self._send(b"SHM " + paths_json.encode("ascii") + b"\n")

    def _cut_off(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        _log(f"host {self.host} did not answer within {_CLOSE_SECONDS:g} s of SIGKILL (unreachable?); "
             "closing its ssh session")
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self, timeout: float) -> bool:
        """Waits for the session to end.

        Returns:
            True if it ended within ``timeout`` seconds.
        """
        if self._proc is None:
            return True
        try:
            self._proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def close(self) -> None:
        """Ends the session: kills the remaining workers, closes stdin, waits, then kills ssh."""
        if self._timer is not None:
            self._timer.cancel()
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._send(b"KILL\n")
        with self._stdin_lock:
            try:
                self._proc.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass
        if not self.wait(_CLOSE_SECONDS):
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._proc.wait()
        for thread in self._threads:
            thread.join(2.0)

    def _send(self, data: bytes) -> None:
        with self._stdin_lock:
            stdin = self._proc.stdin if self._proc is not None else None
            if stdin is None or stdin.closed:
                return
            try:
                stdin.write(data)
                stdin.flush()
            except (OSError, ValueError):
                pass  # the session is gone; its end is reported by _read_reports

    def _check_started(self) -> None:
        missing = [r for r in self.ranks if r not in self._started and r not in self._reported]
        if missing and self._proc is not None and self._proc.poll() is None:
            _log(f"host {self.host} did not start ranks {_ranks(missing)} within "
                 f"{self.start_timeout:g} s (--start-timeout); closing its ssh session")
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _read_reports(self, src: IO[bytes]) -> None:
        try:
            while True:
                line = src.readline(MAX_LINE_BYTES + 64)
                if not line:
                    break
                self._report(line[:-1] if line.endswith(b"\n") else line)
        finally:
            src.close()
            self._session_ended()

    def _report(self, line: bytes) -> None:
        kind, _, rest = line.partition(b" ")
        rank_text, _, payload = rest.partition(b" ")
        rank = int(rank_text) if rank_text.isdigit() else -1
        if kind in (b"o", b"e") and rank in self.ranks:
            self.output.write(rank, "stdout" if kind == b"o" else "stderr", payload)
        elif kind == b"s" and rank in self.ranks:
            self._started.add(rank)
            if self.verbose:
                _log(f"host {self.host}: rank {rank} started (pid {payload.decode()})")
        elif kind == b"x" and rank in self.ranks and payload.lstrip(b"-").isdigit():
            self._reported.add(rank)
            self.events.put(("exit", rank, int(payload)))
        elif kind == b"t":
            if self.verbose:
                _log(f"host {self.host}: {payload.decode('utf-8', 'replace')}")
        elif kind in (b"f", b"w"):
            where = f"rank {rank}: " if kind == b"f" else ""
            _log(f"host {self.host}: {where}{payload.decode('utf-8', 'replace')}")
        else:  # not the bootstrap speaking (a login banner, say): show it
            _log(f"host {self.host}: {line.decode('utf-8', 'replace')}")

    def _read_errors(self, src: IO[bytes]) -> None:
        """Shows what ssh and the remote shell print (e.g. 'Permission denied')."""
        try:
            while True:
                line = src.readline(MAX_LINE_BYTES)
                if not line:
                    return
                _log(f"host {self.host}: {line.decode('utf-8', 'replace').rstrip()}")
        finally:
            src.close()

    def _session_ended(self) -> None:
        """Reports every worker not yet reported as failed once the session is over."""
        assert self._proc is not None
        code = self._proc.wait()
        if self._timer is not None:
            self._timer.cancel()
        missing = [r for r in self.ranks if r not in self._reported]
        if not missing:
            return
        _log(f"host {self.host}: the ssh session ended (exit code {code}) before ranks "
             f"{_ranks(missing)} reported their exit")
        for rank in missing:
            self._reported.add(rank)
            self.events.put(("exit", rank, code if code > 0 else 255))


def _ranks(ranks: Sequence[int]) -> str:
    return ",".join(map(str, ranks))


def bootstrap_spec(
    *,
    command: Sequence[str],
    cwd: str,
    job_id: str,
    grace: float,
    interface: Optional[str],
    env: Mapping[str, str],
    workers: Mapping[int, Mapping[str, str]],
    local_size: Optional[int] = None,
) -> Dict:
    """Builds the bootstrap's job spec.

    Args:
        command: The workers' argv.
        cwd: The directory the workers start in.
        job_id: The job id (names the job's shared memory).
        grace: Seconds between SIGTERM and SIGKILL.
        interface: The network interface whose address the workers advertise, or None.
        env: Variables for every worker of the host.
        workers: Each rank's own variables.
        local_size: The ranks the host runs (for each one's share of its
            CPUs); the number of ``workers`` by default.

    Returns:
        A JSON-serializable mapping.
    """
    return {
        "command": list(command), "cwd": cwd, "job_id": job_id, "grace": grace,
        "interface": interface, "advertise_variable": names.ADVERTISE_HOST, "env": dict(env),
        "workers": [{"rank": r, "env": dict(e)} for r, e in sorted(workers.items())],
        "shm_paths": names.shm_segment_paths(job_id, sorted(workers)),
        "threads": {"source": _read(_THREADS_PATH), "local_size": local_size or len(workers)},
    }


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()
