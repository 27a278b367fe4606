"""The environment of a worker started by ``mpirun`` (Open MPI, or a PMI launcher such as MPICH's)."""

from __future__ import annotations

import os
from typing import Mapping

from ring_strategy import _contracts as names
from ring_strategy.environments.base import override
from ring_strategy.environments.external import ExternalLauncherEnvironment, Layout, read_int

__all__ = ["MpirunEnvironment"]

# Variables whose values are equal on every rank of one mpirun job and differ
# between jobs. Open MPI 4 sets the first three (the last is a random key made
# for each job); Open MPI 5 and other PMIx launchers set PMIX_NAMESPACE.
_JOB_VARIABLES = (
    "OMPI_MCA_orte_hnp_uri",
    "OMPI_MCA_ess_base_jobid",
    "OMPI_MCA_orte_precondition_transports",
    "PMIX_NAMESPACE",
    "PMI_JOBID",
)


class MpirunEnvironment(ExternalLauncherEnvironment):
    """Reads the variables mpirun gives each process.

    Rank and size come from ``OMPI_COMM_WORLD_RANK``/``OMPI_COMM_WORLD_SIZE``
    (Open MPI), else ``PMIX_RANK`` or ``PMI_RANK`` with ``PMI_SIZE``; the local
    rank and size from ``OMPI_COMM_WORLD_LOCAL_RANK``/``_LOCAL_SIZE``, else
    ``MPI_LOCALRANKID``/``MPI_LOCALNRANKS`` (MPICH's Hydra). Hosts are assumed
    to run equally many processes, placed by slot (mpirun's default) or by
    node; the host index follows from that.

    Rendezvous: rank 0 serves the store. On one host it listens on
    ``127.0.0.1`` at a port derived from the job identifiers (Open MPI's job
    id and per-job key, ``PMIX_NAMESPACE``; without any, the launcher daemon's
    process id, which every rank of one host shares), or at
    ``RING_RENDEZVOUS_PORT``. mpirun names no host that every rank can reach
    rank 0 at, so a job on several hosts needs ``RING_RENDEZVOUS_ADDR`` (rank 0's
    ``host:port``) exported to every rank: ``mpirun -x RING_RENDEZVOUS_ADDR ...``.

    The job id and, unless ``RING_SECRET`` is set, the secret are derived from
    those identifiers. A derived secret keeps jobs apart but does not protect
    against other users: export a random ``RING_SECRET`` (hex) with ``-x``.

    Args:
        environ: The variables to read; defaults to ``os.environ``.

    Raises:
        ValueError: If a variable is missing or invalid, or the layout is not regular.

    Example:
        >>> env = MpirunEnvironment({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
        ...     "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        ...     "OMPI_MCA_ess_base_jobid": "42"})
        >>> env.rank, env.cross_size, env.rendezvous_address.startswith("127.0.0.1:")
        (1, 1, True)
    """

    launcher = "mpirun"

    @classmethod
    @override
    def detect(cls) -> bool:
        env = os.environ
        if "OMPI_COMM_WORLD_RANK" in env or "MPI_LOCALRANKID" in env:
            return True
        # An Open MPI singleton (a process that initialised MPI without
        # mpirun: Lightning's MPIEnvironment.detect() does, where mpi4py is
        # installed) sets PMIX_RANK and OMPI_MCA_ess=singleton in its C
        # environment, which the processes it starts inherit: they are not
        # ranks of an mpirun job (mpirun's own ranks have OMPI_MCA_ess=^singleton).
        if env.get("OMPI_MCA_ess") == "singleton":
            return False
        # srun sets PMI_RANK or PMIX_RANK too (--mpi=pmi2/pmix): then the
        # process is a Slurm task, and SlurmEnvironment describes it better.
        return ("PMI_RANK" in env or "PMIX_RANK" in env) and "SLURM_PROCID" not in env

    @override
    def _layout(self, env: Mapping[str, str]) -> Layout:
        rank = read_int(env, "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")
        size = read_int(env, "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
        if rank is None or size is None:
            raise ValueError(
                "mpirun did not set the rank and size (OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE, "
                "or PMI_RANK and PMI_SIZE)"
            )
        local_rank = read_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
        local_size = read_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")
        if local_rank is None or local_size is None:
            if size != 1:
                raise ValueError(
                    "mpirun did not set the local rank and size (OMPI_COMM_WORLD_LOCAL_RANK and "
                    "OMPI_COMM_WORLD_LOCAL_SIZE, or MPI_LOCALRANKID and MPI_LOCALNRANKS)"
                )
            local_rank, local_size = 0, 1
        cross_rank, cross_size = _host_index(rank, size, local_rank, local_size)
        return Layout(rank, size, local_rank, local_size, cross_rank, cross_size)

    @override
    def _job_key(self, env: Mapping[str, str], layout: Layout) -> str:
        found = [f"{n}={env[n]}" for n in _JOB_VARIABLES if env.get(n)]
        if not found:
            if layout.cross_size > 1:
                # Only RING_RENDEZVOUS_ADDR can place such a job; it names the run.
                found = [env.get(names.RENDEZVOUS_ADDR, "")]
            else:
                found = [f"ppid={os.getppid()}"]
        return "|".join([*found, str(layout.size)])

    @override
    def _rendezvous_host(self, env: Mapping[str, str]) -> str:
        raise ValueError(
            f"mpirun started this job on several hosts: export {names.RENDEZVOUS_ADDR}=<rank 0's host>:<port> "
            f"to every rank (mpirun -x {names.RENDEZVOUS_ADDR} ...)"
        )


def _host_index(rank: int, size: int, local_rank: int, local_size: int) -> tuple[int, int]:
    """The host index and count of a regular layout (by slot or by node)."""
    if local_size == size:
        return 0, 1
    if local_size < 1 or size % local_size:
        raise ValueError(
            f"mpirun placed {local_size} processes on this host of a job of {size}: ring needs "
            "equally many processes on every host under mpirun"
        )
    hosts = size // local_size
    if rank % local_size == local_rank:  # by slot: ranks fill one host, then the next
        return rank // local_size, hosts
    if rank // hosts == local_rank:  # by node: ranks go round the hosts
        return rank % hosts, hosts
    raise ValueError(
        f"mpirun placed rank {rank} as local rank {local_rank} of {local_size}, neither by slot nor "
        "by node: use mpirun --map-by slot (the default) or --map-by node"
    )
