"""Cluster environments: where this process sits in a job, per launcher.

:func:`detect_environment` returns the environment of the launcher that
started this process, or :class:`LocalEnvironment` (a job of one) without one.
"""

from __future__ import annotations

from typing import List, Type

from ring_strategy.environments.base import ClusterEnvironment
from ring_strategy.environments.elastic import ElasticEnvironment
from ring_strategy.environments.external import ExternalLauncherEnvironment
from ring_strategy.environments.local import LocalEnvironment
from ring_strategy.environments.mpirun import MpirunEnvironment
from ring_strategy.environments.ringrun import RingrunEnvironment
from ring_strategy.environments.slurm import SlurmEnvironment
from ring_strategy.environments.torchrun import TorchrunEnvironment

__all__ = [
    "DETECTION_ORDER",
    "ClusterEnvironment",
    "ElasticEnvironment",
    "ExternalLauncherEnvironment",
    "LocalEnvironment",
    "MpirunEnvironment",
    "RingrunEnvironment",
    "SlurmEnvironment",
    "TorchrunEnvironment",
    "detect_environment",
]

# The first environment whose detect() is true wins. Launchers nest (srun
# starts torchrun or mpirun, a batch script runs mpirun, ringrun runs under
# any of them), and a process inherits the variables of every launcher above
# it, so the launcher that started this process directly, the innermost one,
# must be asked first:
# - ringrun: its RING_RANK/RING_SIZE are set only by ringrun (or the Ray
#   executor, or a user who means them).
# - ringrun's elastic driver: RING_ELASTIC_WORKER is set by nothing else; its
#   workers get it instead of RING_RANK/RING_SIZE (whose values would go
#   stale), and a job a worker starts drops it.
# - torchrun: it sets RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/PORT for its
#   own workers; torchrun itself is usually started by srun or by hand, rarely
#   by mpirun.
# - mpirun: OMPI_COMM_WORLD_* (Open MPI), PMI_*/PMIX_* (Hydra, PMIx); mpirun
#   inside a Slurm allocation inherits SLURM_PROCID from the batch script, so
#   it comes before Slurm. PMI variables set by srun itself are left to Slurm.
# - Slurm: tasks of an srun step (SLURM_PROCID with SLURM_STEP_ID); last of the
#   launchers because its variables surround every launcher it starts.
# - LocalEnvironment always detects: a single process with no launcher.
DETECTION_ORDER: List[Type[ClusterEnvironment]] = [
    RingrunEnvironment,
    ElasticEnvironment,
    TorchrunEnvironment,
    MpirunEnvironment,
    SlurmEnvironment,
    LocalEnvironment,
]


def detect_environment() -> ClusterEnvironment:
    """Returns the environment of the launcher that started this process.

    Returns:
        An instance of the first class in :data:`DETECTION_ORDER` whose
        ``detect()`` is true.

    Raises:
        ValueError: If the detected launcher's variables are invalid.
    """
    for environment in DETECTION_ORDER:
        if environment.detect():
            return environment()
    raise RuntimeError("no cluster environment detected")  # unreachable: local always is
