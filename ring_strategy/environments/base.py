"""The interface every cluster environment implements."""

from __future__ import annotations

import abc
import dataclasses
import os
from typing import Callable, Optional, TypeVar

from ring_strategy import _contracts as names
from ring_strategy.environments.network import route_address

__all__ = ["ClusterEnvironment", "Layout", "override"]

_F = TypeVar("_F", bound=Callable[..., object])

try:  # Python 3.12+
    from typing import override
except ImportError:  # pragma: no cover - older Pythons

    def override(method: _F) -> _F:
        """Marks a method as overriding its base class's (no-op before 3.12)."""
        return method


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where one process sits in a job, as a launcher describes it."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int

    def check(self, launcher: str) -> None:
        """Raises ValueError naming the launcher if the numbers disagree."""
        pairs = [("rank", self.rank, self.size), ("local rank", self.local_rank, self.local_size),
                 ("host index", self.cross_rank, self.cross_size)]
        for what, index, count in pairs:
            if count < 1 or not 0 <= index < count:
                raise ValueError(f"{launcher} gave an invalid {what}: {index} of {count}")
        if self.local_size > self.size or self.cross_size > self.size:
            raise ValueError(
                f"{launcher} gave {self.local_size} processes per host and {self.cross_size} "
                f"host(s) for a job of {self.size} processes"
            )


class ClusterEnvironment(abc.ABC):
    """Where this process sits in a job, as told by the launcher that started it.

    One subclass per launcher (ringrun, torchrun, mpirun, Slurm, ...) reads that
    launcher's environment variables, checks them and hands what it found to
    this constructor. :func:`ring_strategy.environments.detect_environment`
    picks the first subclass whose :meth:`detect` is true.

    The job is laid out as ``cross_size`` hosts with ``local_size`` workers
    each; ``rank`` numbers all workers, ``local_rank`` the workers on this host,
    ``cross_rank`` the hosts.

    Args:
        layout: This process's place in the job.
        rendezvous_address: ``"host:port"`` of the rendezvous store, or None.
        secret: The job secret, or None.
        job_id: An id unique to this run of the job.
        host_id: A name for this host, equal for all processes that share it.
    """

    def __init__(self, layout: Layout, *, rendezvous_address: Optional[str], secret: Optional[bytes],
                 job_id: str, host_id: str) -> None:
        self._layout_found = layout
        self._rendezvous_address = rendezvous_address
        self._secret = secret
        self._job_id = job_id
        self._host_id = host_id

    @classmethod
    @abc.abstractmethod
    def detect(cls) -> bool:
        """Tells whether the current process was started by this launcher.

        Returns:
            True if this environment's variables are present.
        """

    @property
    def rank(self) -> int:
        """The global rank of this process, in ``[0, size)``."""
        return self._layout_found.rank

    @property
    def size(self) -> int:
        """The number of processes in the job."""
        return self._layout_found.size

    @property
    def local_rank(self) -> int:
        """The rank of this process among those on its host."""
        return self._layout_found.local_rank

    @property
    def local_size(self) -> int:
        """The number of processes on this host."""
        return self._layout_found.local_size

    @property
    def cross_rank(self) -> int:
        """The index of this host among the job's hosts."""
        return self._layout_found.cross_rank

    @property
    def cross_size(self) -> int:
        """The number of hosts in the job."""
        return self._layout_found.cross_size

    @property
    def rendezvous_address(self) -> Optional[str]:
        """``"host:port"`` of the rendezvous store, or None when there is none."""
        return self._rendezvous_address

    @property
    def secret(self) -> Optional[bytes]:
        """The job secret every connection must prove, or None when there is none."""
        return self._secret

    @property
    def job_id(self) -> str:
        """An id unique to this run of the job (names shared-memory segments)."""
        return self._job_id

    @property
    def host_id(self) -> str:
        """A name for this host, equal for all processes that share it."""
        return self._host_id

    @property
    def world_generation(self) -> Optional[int]:
        """The launcher's number for the world this process joins, or None.

        None (the default): the job's membership never changes, and each
        process numbers its own ``init()`` calls. An elastic launcher numbers
        its worlds itself, since a worker that joins later has made fewer
        calls than those it joins; the rendezvous keys carry this number.
        """
        return None

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
        when set, else :meth:`routed_address`.
        """
        if self.cross_size == 1:
            return "127.0.0.1"
        explicit = os.environ.get(names.ADVERTISE_HOST, "").strip()
        if explicit:
            return explicit
        return self.routed_address()

    def routed_address(self) -> str:
        """This host's address as the job's other hosts reach it: here, its
        address on the route to the rendezvous host."""
        return route_address(self.rendezvous_address)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(rank={self.rank}, size={self.size}, "
            f"local_rank={self.local_rank}, local_size={self.local_size}, "
            f"cross_rank={self.cross_rank}, cross_size={self.cross_size}, "
            f"job_id={self.job_id!r}, host_id={self.host_id!r})"
        )
