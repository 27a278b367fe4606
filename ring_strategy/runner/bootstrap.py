"""The program ringrun runs on a remote host, over ssh, to start that host's workers.

ringrun sends this file's source over ssh's stdin and the remote Python runs
it; it needs nothing but the standard library, so a remote host needs no
ringrun of its own. What follows on stdin, and what goes back on stdout, is
the whole protocol between ringrun and one host:

ringrun -> host (stdin)
    One JSON line, the job spec: ``cwd``, ``command`` (argv), ``grace``
    (seconds between SIGTERM and SIGKILL), ``job_id``, ``interface`` (a network
    interface whose IPv4 address the workers advertise, or null) and
    ``advertise_variable`` (the variable that tells them that address),
    ``env`` (variables for every worker), ``workers`` (a list of ``{"rank": R,
    "env": {...}}``), ``shm_paths`` (the shared-memory files these ranks
    create, removed when they have exited) and ``threads`` (``{"source": the
    source of ring_strategy/runner/threads.py, "local_size": the ranks this
    host runs}``: the rule that gives each worker its share of this host's
    CPUs, run here, or null). It holds the job secret, which is why it travels here
    and never on a command line. Then any number of control lines: ``TERM``
    (SIGTERM to every worker's process group, SIGKILL after the grace period)
    or ``KILL`` (SIGKILL now), or ``SHM ["PATH", ...]`` (more files to remove
    with ``shm_paths``: an elastic worker's segments are named by the worlds it
    joins). End of file, which is also what ringrun's death
    or a lost connection looks like, counts as ``TERM``.

host -> ringrun (stdout), one line per message, ``KIND RANK PAYLOAD``
    ``s R PID`` rank R started; ``o R LINE`` / ``e R LINE`` a line of its
    stdout / stderr; ``f R TEXT`` it could not be started; ``x R CODE`` it
    exited with CODE (``Popen.returncode``: negative for a signal), sent after
    its last line; ``w - TEXT`` a warning about the host; ``t - TEXT`` the
    threads each worker computes with here. The program exits when every
    worker has exited.

Each worker runs in its own session, with the remote login environment
updated by ``env`` and its own ``env``, its stdin on /dev/null.
"""

import fcntl
import json
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

# Longest line piece forwarded at once; longer lines are split.
MAX_LINE_BYTES = 64 * 1024
# How long a worker's pipes may stay open after it exited (a grandchild may hold them).
DRAIN_SECONDS = 2.0
_SIOCGIFADDR = 0x8915


def interface_address(name):
    """Returns the IPv4 address of the network interface ``name``.

    Args:
        name: The interface, e.g. ``eth0``.

    Returns:
        The address as a dotted quad.

    Raises:
        OSError: If there is no such interface or it has no IPv4 address.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            packed = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError as e:
            raise OSError(e.errno, f"network interface {name!r} has no IPv4 address here: {e.strerror}") from None
    return socket.inet_ntoa(packed[20:24])


class Channel:
    """Writes protocol messages to ringrun; once ringrun is gone, drops them."""

    def __init__(self, stream):
        self._stream = stream
        self._lock = threading.Lock()
        self._broken = False

    def send(self, kind, rank, payload):
        """Writes one message; ``payload`` is bytes without a newline, or str."""
        if isinstance(payload, str):
            payload = payload.encode("utf-8", "replace")
        line = b"%s %s %s\n" % (kind.encode(), str(rank).encode(), payload.replace(b"\n", b" "))
        with self._lock:
            if self._broken:
                return
            try:
                self._stream.write(line)
                self._stream.flush()
            except (OSError, ValueError):
                self._broken = True


def _pump(src, channel, kind, rank):
    try:
        while True:
            line = src.readline(MAX_LINE_BYTES)
            if not line:
                return
            channel.send(kind, rank, line[:-1] if line.endswith(b"\n") else line)
    finally:
        src.close()


def _read_control(stdin, events):
    while True:
        line = stdin.readline()
        if not line:
            events.put(("control", "EOF"))
            return
        events.put(("control", line.strip().decode("ascii", "replace")))


def thread_rule(spec):
    """ringrun's thread rule from the spec, as a namespace with its
    ``thread_variables`` and ``describe`` (ring_strategy/runner/threads.py), or None."""
    rule = spec.get("threads")
    if not rule:
        return None
    space = {"__name__": "ringrun_threads"}
    exec(compile(rule["source"], "ring_strategy/runner/threads.py", "exec"), space)
    return space


class Host:
    """Starts and supervises the workers of this host."""

    def __init__(self, spec, channel):
        self.spec = spec
        self.channel = channel
        self.events = queue.Queue()
        self.procs = {}
        self.pumps = {}
        self.stopping = False
        self.threads = thread_rule(spec)

    def note_threads(self, common):
        """Tells ringrun the threads each worker of this host computes with."""
        if self.threads is not None:
            self.channel.send("t", "-", self.threads["describe"](common, self.spec["threads"]["local_size"]))

    def environment(self):
        """The variables every worker shares: the login environment and the spec's."""
        env = dict(os.environ)
        env.update(self.spec["env"])
        if self.spec.get("interface"):
            env[self.spec["advertise_variable"]] = interface_address(self.spec["interface"])
        return env

    def start(self, common):
        """Starts every worker; a worker that cannot start is reported as exited."""
        for worker in self.spec["workers"]:
            rank = worker["rank"]
            env = dict(common)
            env.update(worker["env"])
            if self.threads is not None:  # its share of this host's CPUs
                env.update(self.threads["thread_variables"](env, self.spec["threads"]["local_size"]))
            try:
                proc = subprocess.Popen(
                    self.spec["command"], env=env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                )
            except OSError as e:
                self.channel.send("f", rank, f"cannot start {self.spec['command'][0]!r}: {e.strerror or e}")
                self.channel.send("x", rank, "127" if isinstance(e, FileNotFoundError) else "126")
                continue
            self.procs[rank] = proc
            self.channel.send("s", rank, str(proc.pid))
            self.pumps[rank] = [
                threading.Thread(target=_pump, args=(proc.stdout, self.channel, "o", rank), daemon=True),
                threading.Thread(target=_pump, args=(proc.stderr, self.channel, "e", rank), daemon=True),
            ]
            for thread in self.pumps[rank]:
                thread.start()
            threading.Thread(target=self._wait, args=(rank, proc), daemon=True).start()

    def _wait(self, rank, proc):
        self.events.put(("exit", rank, proc.wait()))

    def signal(self, sig):
        """Sends ``sig`` to the process group of every worker still running."""
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass

    def supervise(self):
        """Reports exits and obeys ringrun until every worker has exited."""
        running = set(self.procs)
        kill_at = None
        while running:
            try:
                event = self.events.get(timeout=0.5)
            except queue.Empty:
                if kill_at is not None and time.monotonic() >= kill_at:
                    self.signal(signal.SIGKILL)
                    kill_at = None
                continue
            if event[0] == "exit":
                _, rank, code = event
                running.discard(rank)
                deadline = time.monotonic() + DRAIN_SECONDS
                for thread in self.pumps[rank]:
                    thread.join(max(0.0, deadline - time.monotonic()))
                self.channel.send("x", rank, str(code))
            elif event[1].startswith("SHM "):
                self.spec["shm_paths"].extend(json.loads(event[1][4:]))
            elif event[1] == "KILL":
                self.stopping = True
                self.signal(signal.SIGKILL)
                kill_at = None
            elif event[1] in ("TERM", "EOF") and not self.stopping:
                self.stopping = True
                self.signal(signal.SIGTERM)
                kill_at = time.monotonic() + float(self.spec.get("grace", 5.0))

    def clean_up(self):
        """Kills what stopped workers left in their groups; removes the job's shared memory."""
        if self.stopping:
            for proc in self.procs.values():
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for path in self.spec["shm_paths"]:
            try:
                os.unlink(path)
            except OSError:
                pass


def main():
    """Reads the job spec from stdin, runs this host's workers and reports on stdout."""
    stdin = sys.stdin.buffer
    channel = Channel(sys.stdout.buffer)
    spec = json.loads(stdin.readline())
    host = Host(spec, channel)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: host.events.put(("control", "EOF")))
    try:
        os.chdir(spec["cwd"])
    except OSError as e:
        channel.send("w", "-", f"cannot change to directory {spec['cwd']!r} ({e.strerror}); "
                     f"the workers start in {os.getcwd()!r}")
    try:
        common = host.environment()
    except OSError as e:
        for worker in spec["workers"]:
            channel.send("f", worker["rank"], str(e))
            channel.send("x", worker["rank"], "1")
        return
    threading.Thread(target=_read_control, args=(stdin, host.events), daemon=True).start()
    host.note_threads(common)
    host.start(common)
    try:
        host.supervise()
    finally:
        host.clean_up()


if __name__ == "__main__":
    main()
    # The control reader may still block on stdin; a normal interpreter
    # shutdown would wait on its lock, so leave at once.
    sys.stdout.flush()
    os._exit(0)
