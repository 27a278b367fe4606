"""Names that ringrun, the workers and the native engine must agree on, defined
once on the Python side.

Importable without the native engine (``ringrun`` and the Lightning
self-launcher import it before any engine exists).

Shared-memory names
    The engine builds two meshes per rank, the data mesh and then the control
    mesh, and each rank creates one POSIX shared-memory segment per mesh:
    ``/ring.<job_id>.<rank>`` and ``/ring.<job_id>-c.<rank>``. The C++ side
    of this contract is ``shm_name`` (native/transport/mesh_builder.cc) with
    the mesh suffixes of native/engine/runtime.cc, exported as
    ``ring_strategy._native.shm_segment_names``; tests/test_contracts.py
    checks that both agree. Whoever starts a job's processes removes what
    they leave behind with :func:`remove_job_shm`.

Worker variables
    The ``RING_*`` variables ``ringrun`` gives each worker
    (:func:`ring_strategy.runner.worker_env.worker_environment` writes them;
    :class:`ring_strategy.environments.RingrunEnvironment` reads the layout,
    ``ring_strategy.basics`` the start timeout). The Lightning self-launcher
    and the Ray executor give their workers the same variables through the
    same writer. Each worker also gets the layout under the names
    ``horovodrun`` gives them (:data:`HOROVOD_ALIASES`), since scripts and
    test suites read those. None of these names is a setting of the engine's
    own configuration table (``ring_strategy._native.config_table()``).

Elastic jobs
    ``ringrun``'s elastic driver gives each worker :data:`ELASTIC_WORKER`
    instead of a rank: the worker asks the driver's store for its place in
    each world (generation) the driver forms (:func:`elastic_key`). The
    engine of world ``g`` runs under the job id :func:`world_job_id`, so its
    shared-memory names and rendezvous keys carry the generation and no
    process of one world can join another.
"""

from __future__ import annotations

import os
import re
from typing import Iterable, List

__all__ = [
    "ABANDONED_ENDPOINT",
    "ADVERTISE_HOST",
    "CROSS_RANK",
    "CROSS_SIZE",
    "ELASTIC_TIMEOUT",
    "ELASTIC_WORKER",
    "HOROVOD_ALIASES",
    "HOSTNAME",
    "JOB_ID",
    "LAUNCHER_GRACE_SECONDS",
    "LAUNCHER_PIPE",
    "LAYOUT_VARIABLES",
    "LOCAL_RANK",
    "LOCAL_SIZE",
    "RANK",
    "RENDEZVOUS_ADDR",
    "SECRET",
    "SHM_DIR",
    "SIZE",
    "START_TIMEOUT",
    "TIMELINE_DYNAMIC",
    "WORKER_VARIABLES",
    "WORKER_VARIABLES_AND_ALIASES",
    "check_job_id",
    "elastic_key",
    "job_shm_paths",
    "remove_job_shm",
    "rendezvous_key",
    "shm_segment_names",
    "shm_segment_paths",
    "world_job_id",
]

# ---------------------------------------------------------------- worker variables
RANK = "RING_RANK"
SIZE = "RING_SIZE"
LOCAL_RANK = "RING_LOCAL_RANK"
LOCAL_SIZE = "RING_LOCAL_SIZE"
CROSS_RANK = "RING_CROSS_RANK"
CROSS_SIZE = "RING_CROSS_SIZE"
RENDEZVOUS_ADDR = "RING_RENDEZVOUS_ADDR"
SECRET = "RING_SECRET"
JOB_ID = "RING_JOB_ID"
HOSTNAME = "RING_HOSTNAME"
#: Seconds the workers may take to find each other (read by ``init()``
#: whatever the launcher; ringrun also takes its default from it).
START_TIMEOUT = "RING_START_TIMEOUT"

#: Set only by ringrun's elastic driver: the worker's number in the job
#: (``0``, ``1``, ... in launch order). Its presence makes the worker an
#: elastic one (:class:`~ring_strategy.environments.ElasticEnvironment`).
ELASTIC_WORKER = "RING_ELASTIC_WORKER"
#: Seconds an elastic job may have fewer than ``--min-np`` workers, and an
#: elastic worker may wait for its next world (``HOROVOD_ELASTIC_TIMEOUT``
#: is read too).
ELASTIC_TIMEOUT = "RING_ELASTIC_TIMEOUT"

#: What :class:`~ring_strategy.environments.RingrunEnvironment` reads: the
#: worker's place in the job and how to reach its peers.
LAYOUT_VARIABLES = (
    RANK, SIZE, LOCAL_RANK, LOCAL_SIZE, CROSS_RANK, CROSS_SIZE, RENDEZVOUS_ADDR, SECRET, JOB_ID, HOSTNAME,
)
#: Every ``RING_*`` variable each worker of a job gets, whoever started it.
WORKER_VARIABLES = LAYOUT_VARIABLES + (START_TIMEOUT,)
#: ``horovodrun``'s name of a worker variable -> ours; each worker gets both,
#: with the same value.
HOROVOD_ALIASES = {
    "HOROVOD_RANK": RANK,
    "HOROVOD_SIZE": SIZE,
    "HOROVOD_LOCAL_RANK": LOCAL_RANK,
    "HOROVOD_LOCAL_SIZE": LOCAL_SIZE,
    "HOROVOD_CROSS_RANK": CROSS_RANK,
    "HOROVOD_CROSS_SIZE": CROSS_SIZE,
    "HOROVOD_HOSTNAME": HOSTNAME,
}
#: Every variable each worker of a job gets: ours, then Horovod's names.
WORKER_VARIABLES_AND_ALIASES = WORKER_VARIABLES + tuple(HOROVOD_ALIASES)

#: ``RING_TIMELINE`` / ``HOROVOD_TIMELINE`` (and ``ringrun
#: --timeline-filename``) set to this: no timeline file now, the script may
#: call ``start_timeline()`` later (the engine's ``TIMELINE_DYNAMIC``).
TIMELINE_DYNAMIC = "DYNAMIC"

#: Given to the workers ringrun starts on its own host: ``<fd>:<inode>`` of a
#: pipe whose other end only ringrun holds, and ringrun's grace period
#: (read by ring_strategy.launcher_watch).
LAUNCHER_PIPE = "RING_LAUNCHER_PIPE"
LAUNCHER_GRACE_SECONDS = "RING_LAUNCHER_GRACE_SECONDS"
#: The address a worker advertises to its peers, where the launcher knows it
#: (``--network-interface``, Ray nodes, "hosts" that are all this machine).
ADVERTISE_HOST = "RING_ADVERTISE_HOST"

# ---------------------------------------------------------------- shared memory
#: Where Linux keeps POSIX shared-memory names: ``/ring.x.0`` is ``SHM_DIR/ring.x.0``.
SHM_DIR = "/dev/shm"
# The engine's meshes in the order it builds them (data, control), by the
# suffix each adds to the job id.
_MESH_SUFFIXES = ("", "-c")
# A job id is also part of file names: no '/', no '.', never empty.
_JOB_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_job_id(job_id: str) -> str:
    """Returns ``job_id`` if it can name a job, else raises.

    Args:
        job_id: 1 to 64 letters, digits, ``_`` or ``-``.

    Raises:
        ValueError: Quoting the bad value.
    """
    if not isinstance(job_id, str) or not _JOB_ID_PATTERN.match(job_id):
        raise ValueError(f"{JOB_ID} should be 1 to 64 letters, digits, '_' or '-'. Got: {job_id!r}")
    return job_id


def shm_segment_names(job_id: str, rank: int) -> List[str]:
    """Every POSIX shared-memory name rank ``rank`` of job ``job_id`` creates.

    Args:
        job_id: The job id (see :func:`check_job_id`).
        rank: The rank, 0 or more.

    Returns:
        The names, with their leading ``/``, data mesh first.

    Example:
        >>> shm_segment_names("abc", 2)
        ['/ring.abc.2', '/ring.abc-c.2']
    """
    check_job_id(job_id)
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank should be a non-negative integer. Got: {rank!r}")
    return [f"/ring.{job_id}{suffix}.{rank}" for suffix in _MESH_SUFFIXES]


def world_job_id(job_id: str, generation: int) -> str:
    """The job id the engine of world ``generation`` of elastic job ``job_id`` runs under.

    Example:
        >>> world_job_id("abc", 3)
        'abc_g3'
    """
    check_job_id(job_id)
    return check_job_id(f"{job_id}_g{int(generation)}")


def rendezvous_key(job_id: str, generation: int, *parts: object) -> str:
    """A key of ``init()``'s rendezvous for world ``generation`` of job ``job_id``.

    ``init()`` writes ``endpoint/<rank>`` (the rank's engine endpoint), then
    ``connected/<rank>`` and ``done/<rank>``, and waits for every rank's.
    The elastic driver writes the missing ones of a world it gave up on, so
    that no rank waits for them (:data:`ABANDONED_ENDPOINT`).
    """
    return "/".join([f"ring/{job_id}/init{int(generation)}", *(str(p) for p in parts)])


#: The endpoint the elastic driver writes for a rank of a world it gave up
#: on: the engine rejects it, so ``init()`` fails at once.
ABANDONED_ENDPOINT = "abandoned-world"


def elastic_key(job_id: str, *parts: object) -> str:
    """A key of elastic job ``job_id``'s membership in the driver's store.

    ``elastic_key(job, "world", g)`` holds world ``g`` (written once, before
    ``elastic_key(job, "latest")`` says ``g``); see
    :mod:`ring_strategy.runner.membership` for the value.
    """
    return "/".join(["ring", job_id, "elastic", *(str(p) for p in parts)])


def shm_segment_paths(job_id: str, ranks: Iterable[int]) -> List[str]:
    """The files under :data:`SHM_DIR` that the ranks ``ranks`` of job ``job_id`` create.

    For a host that knows its ranks but has no ``ring_strategy`` to ask
    (ringrun's remote bootstrap gets this list in its job spec).
    """
    return [os.path.join(SHM_DIR, name.lstrip("/")) for rank in ranks for name in shm_segment_names(job_id, rank)]


def job_shm_paths(job_id: str) -> List[str]:
    """The paths under :data:`SHM_DIR` of job ``job_id``'s segments that exist now, any rank.

    Only names :func:`shm_segment_names` gives for some rank of this job, or
    of one of its elastic worlds (:func:`world_job_id`), count, so job
    ``abc`` never claims job ``abcd``'s segments. (A job id ending in ``-c``
    or ``_g<N>`` shares names with the control mesh or a world of the id
    without it: give jobs ids that do not.)
    """
    check_job_id(job_id)
    try:
        entries = os.listdir(SHM_DIR)
    except OSError:
        return []
    world = re.compile(re.escape(job_id) + r"(_g[0-9]+)?")
    found = []
    for entry in entries:
        head, _, rank = entry.rpartition(".")
        if not (rank.isascii() and rank.isdigit() and head.startswith("ring.")):
            continue
        mesh_id = head[len("ring."):]
        owners = [i for i in (mesh_id, mesh_id[:-len("-c")]) if world.fullmatch(i)]
        if any("/" + entry in shm_segment_names(i, int(rank)) for i in owners):
            found.append(os.path.join(SHM_DIR, entry))
    return sorted(found)


def remove_job_shm(job_id: str) -> List[str]:
    """Removes every shared-memory segment of job ``job_id`` on this host, any rank.

    Call it once the job's processes on this host have ended: the engine
    removes its own names at shutdown, this catches those of a process that
    crashed or was killed.

    Args:
        job_id: The job id.

    Returns:
        The paths removed.
    """
    removed = []
    for path in job_shm_paths(job_id):
        try:
            os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed
