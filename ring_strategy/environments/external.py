"""The common part of the environments of launchers that are not ring's own.

``ringrun`` serves the rendezvous store and gives every worker a fresh secret.
torchrun, mpirun and Slurm do neither, so for them rank 0 serves the store and
every rank derives the same address, secret and job id from the launcher's
variables. How each is chosen:

- Rendezvous address: ``RING_RENDEZVOUS_ADDR`` (``host:port``) when set.
  Otherwise the host is ``127.0.0.1`` for a job on one host, else a host the
  launcher names (see each environment), and the port is
  ``RING_RENDEZVOUS_PORT`` when set, else one derived from the job.
- Secret: ``RING_SECRET`` (hex) when set. Otherwise it is derived from the
  launcher's job identifiers. That keeps concurrent jobs apart, but it is not a
  secret: anyone who can read those identifiers (often every user of a
  cluster) can compute it. For real protection export a random
  ``RING_SECRET`` to every rank, e.g. ``export RING_SECRET=$(openssl rand -hex 32)``
  before the launcher starts (never pass it on a command line).
- Job id: derived from the same identifiers, so it is equal on every rank and
  differs between runs.
"""

from __future__ import annotations

import abc
import hashlib
import os
import socket
import warnings
from typing import ClassVar, Mapping, Optional

from ring_strategy import _config_values, _contracts as names
from ring_strategy.environments.base import ClusterEnvironment, Layout, override
from ring_strategy.environments.network import is_local_address, is_loopback, join_address, split_address
from ring_strategy.environments.ringrun import _secret

__all__ = ["ExternalLauncherEnvironment", "Layout", "derived_port", "join_address", "read_int", "require_int"]

#: Derived rendezvous ports lie in [PORT_BASE, PORT_BASE + PORT_SPAN): below
#: Linux's ephemeral range (32768-60999), so outgoing connections never hold them.
PORT_BASE = 20000
PORT_SPAN = 12000


def read_int(env: Mapping[str, str], *names: str) -> Optional[int]:
    """Reads the first of ``names`` that is set, as an integer.

    Args:
        env: The variables.
        *names: Variable names, most preferred first.

    Returns:
        The value, or None when no name is set.

    Raises:
        ValueError: If the value is not an integer; the message quotes it.
    """
    return _config_values.read(env, _config_values.integer("an integer"), *names)


def require_int(env: Mapping[str, str], launcher: str, *names: str) -> int:
    """Like :func:`read_int`, but a missing value is an error naming ``names``."""
    value = read_int(env, *names)
    if value is None:
        raise ValueError(f"{launcher} did not set {' or '.join(names)}")
    return value


def derived_port(key: str) -> int:
    """A port in ``[PORT_BASE, PORT_BASE + PORT_SPAN)`` that depends only on ``key``."""
    digest = hashlib.sha256(b"ring-rendezvous-port\0" + key.encode()).digest()
    return PORT_BASE + int.from_bytes(digest[:4], "big") % PORT_SPAN


class ExternalLauncherEnvironment(ClusterEnvironment):
    """A job started by a launcher that serves no rendezvous store.

    Subclasses read the launcher's variables (:meth:`_layout`), name the run
    (:meth:`_job_key`) and, for jobs on several hosts, the host of rank 0
    (:meth:`_rendezvous_host`); see the module docstring for how the
    rendezvous address, secret and job id follow. Rank 0 serves the store.

    Args:
        environ: The variables to read; defaults to ``os.environ``.

    Raises:
        ValueError: If a variable is missing or invalid; the message names it.
    """

    #: Names the launcher in messages and job ids.
    launcher: ClassVar[str] = "launcher"

    def __init__(self, environ: Optional[Mapping[str, str]] = None) -> None:
        env = os.environ if environ is None else environ
        layout = self._layout(env)
        layout.check(self.launcher)
        key = f"{self.launcher}|{self._job_key(env, layout)}"
        explicit = _secret(env, names.SECRET, required=False)
        self._secret_derived = explicit is None
        super().__init__(
            layout,
            rendezvous_address=self._read_address(env, layout, key),
            secret=explicit or hashlib.sha256(b"ring-derived-secret\0" + key.encode()).digest(),
            job_id=f"{self.launcher}-{hashlib.sha256(key.encode()).hexdigest()[:16]}",
            host_id=self._read_host_id(env),
        )
        if self._secret_derived and layout.cross_size > 1 and layout.rank == 0:
            warnings.warn(
                f"{self.launcher}: RING_SECRET is not set, so the job secret is derived from the "
                "launcher's job ids, which other users may know; export a random RING_SECRET "
                "(hex) to every rank to protect the job's connections",
                RuntimeWarning, stacklevel=2,
            )

    # -- what subclasses provide ------------------------------------------------

    @abc.abstractmethod
    def _layout(self, env: Mapping[str, str]) -> Layout:
        """Reads rank, size, local and cross rank and size from the launcher's variables."""

    @abc.abstractmethod
    def _job_key(self, env: Mapping[str, str], layout: Layout) -> str:
        """Identifiers of this run that are equal on every rank and differ between runs."""

    @abc.abstractmethod
    def _rendezvous_host(self, env: Mapping[str, str]) -> str:
        """The host of rank 0 as the other hosts reach it (jobs on several hosts)."""

    def _default_port(self, env: Mapping[str, str], key: str) -> int:
        """The rendezvous port when no variable gives one."""
        return derived_port(key)

    def _read_host_id(self, env: Mapping[str, str]) -> str:
        """A name of this host, equal for every process on it."""
        return socket.gethostname()

    # -- derived values ---------------------------------------------------------

    def _read_address(self, env: Mapping[str, str], layout: Layout, key: str) -> str:
        explicit = env.get(names.RENDEZVOUS_ADDR, "").strip()
        if explicit:
            try:
                split_address(explicit)
            except ValueError:
                raise ValueError(f"{names.RENDEZVOUS_ADDR} should look like 'host:port'. Got: {explicit!r}") from None
            return explicit
        port = read_int(env, "RING_RENDEZVOUS_PORT")
        if port is None:
            port = self._default_port(env, key)
        elif not 0 < port < 65536:
            raise ValueError(f"RING_RENDEZVOUS_PORT should be a port number. Got: {env['RING_RENDEZVOUS_PORT']!r}")
        host = "127.0.0.1" if layout.cross_size == 1 else self._rendezvous_host(env)
        return join_address(host, port)

    @property
    def secret_is_derived(self) -> bool:
        """True when no ``RING_SECRET`` was given and the secret was derived from job ids."""
        return self._secret_derived

    @property
    @override
    def rendezvous_bind_address(self) -> Optional[str]:
        """Rank 0's listening address: the rendezvous host's loopback or every interface.

        Raises:
            ValueError: On rank 0 of a multi-host job whose rendezvous address
                names another host.
        """
        if self.rank != 0:
            return None
        address = self.rendezvous_address
        assert address is not None  # always set for these launchers
        host, port = split_address(address)
        if is_loopback(host):
            return join_address(host if host != "localhost" else "127.0.0.1", port)
        if not is_local_address(host):
            raise ValueError(
                f"{self.launcher}: rank 0 serves the rendezvous store, but the rendezvous address "
                f"{address} names another host than rank 0's ({socket.gethostname()}); "
                "set RING_RENDEZVOUS_ADDR to rank 0's host and a free port"
            )
        return join_address("::" if ":" in host else "0.0.0.0", port)
