"""Cluster environments: where this process sits in a job, per launcher.

:func:`detect_environment` returns the environment of the launcher that
started this process, or :class:`LocalEnvironment` (a job of one) without one.
"""

from __future__ import annotations

from typing import List, Type

from ring_strategy.environments.base import ClusterEnvironment
from ring_strategy.environments.local import LocalEnvironment
from ring_strategy.environments.ringrun import RingrunEnvironment

__all__ = [
    "DETECTION_ORDER",
    "ClusterEnvironment",
    "LocalEnvironment",
    "RingrunEnvironment",
    "detect_environment",
]

# The first environment whose detect() is true wins, so the order matters:
# - ringrun comes first: its RING_* variables are set only by ringrun (or a
#   user who means them), and a ringrun job may itself run inside Slurm or
#   under another launcher whose variables describe the outer allocation.
# - torchrun, mpirun (OMPI_*/PMI_*) and Slurm (SLURM_PROCID) will go here, most
#   specific first: Slurm last, because srun also sets its variables around
#   processes that another launcher started.
# - LocalEnvironment always detects: a single process with no launcher.
DETECTION_ORDER: List[Type[ClusterEnvironment]] = [
    RingrunEnvironment,
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
