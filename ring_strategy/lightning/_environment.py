"""Lightning's view of a ring job: the methods of ``RingEnvironment``.

:class:`RingEnvironmentMixin` holds them without a Lightning base class; each
Lightning package gets its own ``RingEnvironment`` from it and that package's
``ClusterEnvironment`` (:mod:`ring_strategy.lightning.strategy` for
``pytorch_lightning``, :mod:`ring_strategy.lightning.lightning_pytorch` for
``lightning.pytorch``). Nothing here imports Lightning.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Optional

from ring_strategy.environments import ClusterEnvironment as JobEnvironment
from ring_strategy.environments import LocalEnvironment, detect_environment
from ring_strategy.environments.base import override

if TYPE_CHECKING:  # what type checkers see as the base; at run time each package supplies its own
    from lightning_fabric.plugins.environments.cluster_environment import ClusterEnvironment as _Base
else:
    _Base = object

__all__ = ["RingEnvironmentMixin", "launcher_job"]


def launcher_job() -> Optional[JobEnvironment]:
    """The job as the launcher that started this process describes it
    (ringrun, torchrun, mpirun, Slurm; see ring_strategy.environments), or
    None without one."""
    env = detect_environment()
    return None if isinstance(env, LocalEnvironment) else env


class RingEnvironmentMixin(_Base):
    """Lightning's view of a ring job, read from its launcher's variables.

    Under ``ringrun``, ``torchrun``, ``mpirun`` or ``srun`` (or in a worker
    that ``RingStrategy`` started) the variables describe the job and the
    processes exist already. Before the first process of a self-launched job
    has started the others, the world size is whatever the strategy sets
    (``devices * num_nodes``) and this process is rank 0.
    """

    def __init__(self) -> None:
        super().__init__()
        self._world_size = 1
        self._global_rank = 0

    @property
    @override
    def creates_processes_externally(self) -> bool:
        return launcher_job() is not None

    def _rendezvous(self) -> str:
        job = launcher_job()
        return (job.rendezvous_address if job is not None else None) or "127.0.0.1:0"

    @property
    @override
    def main_address(self) -> str:
        return self._rendezvous().rpartition(":")[0].strip("[]")

    @property
    @override
    def main_port(self) -> int:
        return int(self._rendezvous().rpartition(":")[2])

    @staticmethod
    @override
    def detect() -> bool:
        return launcher_job() is not None

    @override
    def world_size(self) -> int:
        job = launcher_job()
        return self._world_size if job is None else job.size

    @override
    def set_world_size(self, size: int) -> None:
        self._world_size = size

    @override
    def global_rank(self) -> int:
        job = launcher_job()
        return self._global_rank if job is None else job.rank

    @override
    def set_global_rank(self, rank: int) -> None:
        self._global_rank = rank

    @override
    def local_rank(self) -> int:
        job = launcher_job()
        return 0 if job is None else job.local_rank

    @override
    def node_rank(self) -> int:
        job = launcher_job()
        return 0 if job is None else job.cross_rank

    @override
    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Checks ``devices`` and ``num_nodes`` against the job.

        Under a launcher either ``devices`` equals the processes per host and
        ``num_nodes`` the hosts (as with DDP under torchrun), or both are 1
        (one device per process, as with Horovod). Without one, the first
        process starts ``devices`` workers on this host, so ``num_nodes`` must
        be 1 and ``devices`` at most the number of CPUs.
        """
        if num_devices < 1 or num_nodes < 1:
            raise ValueError(f"RingStrategy: devices and num_nodes should be positive. Got: {num_devices}, {num_nodes}")
        job = launcher_job()
        if job is not None:
            size, local, hosts = job.size, job.local_size, job.cross_size
            if num_devices * num_nodes == 1 or (num_devices == local and num_nodes == hosts):
                return
            raise ValueError(
                f"RingStrategy: Trainer(devices={num_devices}, num_nodes={num_nodes}) does not match the "
                f"launcher's job of {size} processes ({local} per host on {hosts} host(s)): use "
                f"devices={local}, num_nodes={hosts}, or devices=1, num_nodes=1"
            )
        if num_nodes != 1:
            raise ValueError(
                f"RingStrategy: num_nodes={num_nodes} needs a launcher that starts the other hosts' "
                "processes: run the script with ringrun -H host1:N,host2:N ..."
            )
        cpus = os.cpu_count() or 1
        if num_devices > cpus:
            raise ValueError(
                f"RingStrategy: devices={num_devices} is more than the {cpus} CPUs of this host; "
                f"use at most devices={cpus}, or start the processes yourself with ringrun -np {num_devices}"
            )
