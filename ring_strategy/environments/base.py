"""The interface every cluster environment implements."""

from __future__ import annotations

import abc
import os
from typing import Callable, Optional, TypeVar

from ring_strategy.environments.network import route_address

__all__ = ["ClusterEnvironment", "override"]

_F = TypeVar("_F", bound=Callable[..., object])

try:  # Python 3.12+
    from typing import override
except ImportError:  # pragma: no cover - older Pythons

    def override(method: _F) -> _F:
        """Marks a method as overriding its base class's (no-op before 3.12)."""
        return method


class ClusterEnvironment(abc.ABC):
    """Where this process sits in a job, as told by the launcher that started it.

    One subclass per launcher (ringrun, torchrun, mpirun, Slurm, ...) reads that
    launcher's environment variables. :func:`ring_strategy.environments.detect_environment`
    picks the first whose :meth:`detect` is true.

    The job is laid out as ``cross_size`` hosts with ``local_size`` workers
    each; ``rank`` numbers all workers, ``local_rank`` the workers on this host,
    ``cross_rank`` the hosts.
    """

    @classmethod
    @abc.abstractmethod
    def detect(cls) -> bool:
        """Tells whether the current process was started by this launcher.

        Returns:
            True if this environment's variables are present.
        """

    @property
    @abc.abstractmethod
    def rank(self) -> int:
        """The global rank of this process, in ``[0, size)``."""

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """The number of processes in the job."""

    @property
    @abc.abstractmethod
    def local_rank(self) -> int:
        """The rank of this process among those on its host."""

    @property
    @abc.abstractmethod
    def local_size(self) -> int:
        """The number of processes on this host."""

    @property
    @abc.abstractmethod
    def cross_rank(self) -> int:
        """The index of this host among the job's hosts."""

    @property
    @abc.abstractmethod
    def cross_size(self) -> int:
        """The number of hosts in the job."""

    @property
    @abc.abstractmethod
    def rendezvous_address(self) -> Optional[str]:
        """``"host:port"`` of the rendezvous store, or None when there is none."""

    @property
    @abc.abstractmethod
    def secret(self) -> Optional[bytes]:
        """The job secret every connection must prove, or None when there is none."""

    @property
    @abc.abstractmethod
    def job_id(self) -> str:
        """An id unique to this run of the job (names shared-memory segments)."""

    @property
    @abc.abstractmethod
    def host_id(self) -> str:
        """A name for this host, equal for all processes that share it."""

    @property
    def rendezvous_bind_address(self) -> Optional[str]:
        """``"host:port"`` this process serves the rendezvous store on, or None.

        None (the default) when the launcher serves the store, as ``ringrun``
        does. Launchers that serve none (torchrun, mpirun, Slurm) leave it to
        rank 0, whose environment returns the address to listen on.
        """
        return None

    @property
    def bind_host(self) -> str:
        """The interface the engine listens on for its peers.

        Loopback for a job on one host, so nothing outside it can connect;
        every interface (``0.0.0.0``) for a job on several hosts.
        """
        return "127.0.0.1" if self.cross_size == 1 else "0.0.0.0"

    @property
    def advertise_host(self) -> str:
        """The address peers connect to, published at the rendezvous.

        Loopback for a job on one host. On several hosts ``RING_ADVERTISE_HOST``
        when set, else this host's address on the route to the rendezvous host.
        """
        if self.cross_size == 1:
            return "127.0.0.1"
        explicit = os.environ.get("RING_ADVERTISE_HOST", "").strip()
        if explicit:
            return explicit
        return route_address(self.rendezvous_address)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(rank={self.rank}, size={self.size}, "
            f"local_rank={self.local_rank}, local_size={self.local_size}, "
            f"cross_rank={self.cross_rank}, cross_size={self.cross_size}, "
            f"job_id={self.job_id!r}, host_id={self.host_id!r})"
        )
