"""Hosts for multi-host tests, made of Linux network namespaces on this machine.

:class:`Cluster` builds ``n`` "hosts": one network namespace each, with an
``eth0`` on a bridge that lives in a namespace of its own, and an sshd that
listens on the host's address and accepts a key made for the cluster. Nothing
is connected to the machine's own network, so the traffic of a test never
leaves the namespaces. The namespaces share this machine's filesystem and
process table, so the same Python and checkout work on every "host".

Needs root, iproute2 (``ip netns``) and OpenSSH's server and client.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from typing import List, Optional, Sequence

__all__ = ["Cluster", "missing_requirement"]

SUBNET = "10.99.0"
SSHD = "/usr/sbin/sshd"
# Where sshd insists on its privilege-separation directory.
_PRIVSEP_DIR = "/run/sshd"
_SSH_OPTIONS = "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"

_SSHD_CONFIG = """\
Port 22
ListenAddress {address}
HostKey {dir}/host_key
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
PidFile none
LogLevel ERROR
"""


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def missing_requirement() -> Optional[str]:
    """Says why namespace hosts cannot be built here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for program, package in (("ip", "iproute2"), ("tc", "iproute2"), ("ssh", "openssh-client"),
                             ("ssh-keygen", "openssh-client")):
        if shutil.which(program) is None:
            return f"{program} is missing (Debian package {package}; `make sysdeps` installs it)"
    if not os.access(SSHD, os.X_OK):
        return f"{SSHD} is missing (Debian package openssh-server; `make sysdeps` installs it)"
    probe = f"ringprobe{secrets.token_hex(3)}"
    made = _run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` does not work here: {made.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    return None


class Cluster:
    """``count`` namespace hosts on one bridge, each with its own sshd.

    Host ``i`` has the address ``10.99.0.(10 + i)`` on its ``eth0``.

    Args:
        workdir: A directory for keys and configuration.
        count: The number of hosts.
    """

    def __init__(self, workdir: Path, count: int) -> None:
        self.dir = workdir
        self.count = count
        self.prefix = f"ring{secrets.token_hex(3)}"
        self.switch = f"{self.prefix}sw"
        self.namespaces = [f"{self.prefix}h{i}" for i in range(count)]
        self.addresses = [f"{SUBNET}.{10 + i}" for i in range(count)]
        self.key = self.dir / "id_ed25519"
        self._made: List[str] = []
        self._sshd: List[subprocess.Popen] = []

    # -- building -----------------------------------------------------------

    def start(self) -> None:
        """Builds the namespaces and the links, starts every sshd and waits for them."""
        try:
            self._make_network()
            self._make_keys()
            for i in range(self.count):
                self._start_sshd(i)
            self._wait_for_sshd(timeout=15.0)
        except BaseException:
            self.stop()
            raise

    def _make_network(self) -> None:
        _run("ip", "netns", "add", self.switch)
        self._made.append(self.switch)
        _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.switch, "link", "set", "br0", "up")
        for i, (ns, address) in enumerate(zip(self.namespaces, self.addresses)):
            _run("ip", "netns", "add", ns)
            self._made.append(ns)
            _run("ip", "-n", self.switch, "link", "add", f"v{i}", "type", "veth",
                 "peer", "name", "eth0", "netns", ns)
            _run("ip", "-n", self.switch, "link", "set", f"v{i}", "master", "br0", "up")
            _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")

    def _make_keys(self) -> None:
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.dir / "host_key"))
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key))
        shutil.copy(f"{self.key}.pub", self.dir / "authorized_keys")
        os.makedirs(_PRIVSEP_DIR, mode=0o755, exist_ok=True)

    def _start_sshd(self, i: int) -> None:
        config = self.dir / f"sshd_config.{i}"
        config.write_text(_SSHD_CONFIG.format(address=self.addresses[i], dir=self.dir))
        log = open(self.dir / f"sshd.{i}.log", "wb")
        self._sshd.append(subprocess.Popen(
            ["ip", "netns", "exec", self.namespaces[i], SSHD, "-D", "-e", "-f", str(config)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        ))

    def _wait_for_sshd(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for i, address in enumerate(self.addresses):
            while True:
                probe = self.run_in(0, ["ssh", *self.ssh_args(), address, "true"], timeout=10)
                if probe.returncode == 0:
                    break
                if self._sshd[i].poll() is not None or time.monotonic() > deadline:
                    log = (self.dir / f"sshd.{i}.log").read_text(errors="replace")
                    raise RuntimeError(f"sshd of host {i} ({address}) does not answer: "
                                       f"{probe.stderr.strip()}\n{log}")
                time.sleep(0.1)

    def stop(self) -> None:
        """Stops every sshd and removes the namespaces (and with them the links)."""
        for proc in self._sshd:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._sshd.clear()
        for ns in reversed(self._made):
            _run("ip", "netns", "del", ns, check=False)
        self._made.clear()

    # -- using --------------------------------------------------------------

    def ssh_args(self) -> List[str]:
        """ssh arguments that reach any host of the cluster as root with its key."""
        return ["-i", str(self.key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                *_SSH_OPTIONS.split()]

    def ringrun_env(self) -> dict:
        """Variables for ringrun: RING_SSH_ARGS keeps the machine's known_hosts untouched."""
        return {"RING_SSH_ARGS": _SSH_OPTIONS}

    def hosts(self, slots: Sequence[int]) -> str:
        """A ``-H`` value: host ``i`` with ``slots[i]`` slots (hosts with 0 left out)."""
        return ",".join(f"{a}:{s}" for a, s in zip(self.addresses, slots) if s)

    def exec_prefix(self, i: int) -> List[str]:
        """The argv prefix that runs a command in host ``i``."""
        return ["ip", "netns", "exec", self.namespaces[i]]

    def run_in(self, i: int, cmd: Sequence[str], timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        """Runs ``cmd`` in host ``i`` and returns its result (text output)."""
        return subprocess.run([*self.exec_prefix(i), *cmd], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, **kwargs)

    def kill_processes(self, i: int) -> List[int]:
        """Kills (SIGKILL) every process of host ``i`` but its sshd, as if the
        machine's programs died while its network stays up; returns their pids."""
        pids = [int(p) for p in _run("ip", "netns", "pids", self.namespaces[i]).stdout.split()]
        victims = [p for p in pids if p != self._sshd[i].pid]
        for pid in victims:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        return victims

    def processes(self, i: int) -> List[str]:
        """The command lines of the processes of host ``i`` but its sshd."""
        found = []
        for pid in _run("ip", "netns", "pids", self.namespaces[i]).stdout.split():
            if int(pid) == self._sshd[i].pid:
                continue
            try:
                found.append(f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:
                continue
        return found

    def shape(self, rate: str) -> None:
        """Limits every host's ``eth0`` to ``rate`` (e.g. ``1gbit``) in each direction."""
        for ns in self.namespaces:
            _run("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root",
                 "tbf", "rate", rate, "burst", "256kb", "latency", "20ms")

    def impair(self, *netem: str) -> None:
        """Gives every host's ``eth0`` a ``tc netem`` discipline, e.g.
        ``impair("loss", "1%", "delay", "5ms", "1ms")``; :meth:`unshape` removes it."""
        for ns in self.namespaces:
            _run("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "netem", *netem)

    def set_link(self, i: int, up: bool) -> None:
        """Takes host ``i``'s ``eth0`` down (the host is cut off) or back up."""
        _run("ip", "-n", self.namespaces[i], "link", "set", "eth0", "up" if up else "down")

    def unshape(self) -> None:
        """Removes the limits of :meth:`shape` and :meth:`impair`."""
        for ns in self.namespaces:
            _run("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
