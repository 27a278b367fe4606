"""The environment ringrun gives each worker.

A worker learns its place in the job from ``RING_*`` variables, read by
:class:`ring_strategy.environments.RingrunEnvironment`, also given under the
names ``horovodrun`` uses (``HOROVOD_RANK``, ...). Workers on other hosts
also get ringrun's own environment, less the variables that describe only the
host ringrun runs on (:func:`forwarded_environment`), on top of their login
environment.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional

from ring_strategy import _contracts as names

__all__ = ["elastic_worker_environment", "forwarded_environment", "worker_environment"]

# Variables that describe ringrun's host or login session, not the job: a
# remote worker keeps its own host's values.
_HOST_ONLY = frozenset({
    "_", "DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "HOME", "HOSTNAME", "LOGNAME", "LS_COLORS",
    "MAIL", "OLDPWD", "PS1", "PWD", names.ADVERTISE_HOST, "SHELL", "SHLVL", "TERM", "TMPDIR",
    "USER", "XAUTHORITY",
})
_HOST_ONLY_PREFIXES = ("BASH_FUNC_", "SSH_", "XDG_")


def worker_environment(
    base: Mapping[str, str],
    *,
    rank: int,
    size: int,
    rendezvous_address: str,
    secret: bytes,
    job_id: str,
    start_timeout: float,
    hostname: str,
    local_rank: Optional[int] = None,
    local_size: Optional[int] = None,
    cross_rank: int = 0,
    cross_size: int = 1,
) -> Dict[str, str]:
    """Builds the environment of one worker.

    Without the placement arguments the job runs on one host: the local rank
    and size are the global ones.

    Args:
        base: The environment to start from (ringrun's own, for a local worker).
        rank: The worker's rank.
        size: The number of workers.
        rendezvous_address: ``host:port`` of the rendezvous store.
        secret: The job secret.
        job_id: The job id.
        start_timeout: Seconds the workers may take to find each other.
        hostname: The name of the worker's host; workers with equal names talk
            through shared memory, the others over TCP.
        local_rank: The worker's rank on its host (default: ``rank``).
        local_size: The number of workers on its host (default: ``size``).
        cross_rank: The index of its host among the job's hosts.
        cross_size: The number of hosts.

    Returns:
        A new environment mapping.
    """
    env = _job_variables(base, rendezvous_address=rendezvous_address, secret=secret, job_id=job_id,
                         start_timeout=start_timeout, hostname=hostname)
    env.update({
        names.RANK: str(rank),
        names.SIZE: str(size),
        names.LOCAL_RANK: str(rank if local_rank is None else local_rank),
        names.LOCAL_SIZE: str(size if local_size is None else local_size),
        names.CROSS_RANK: str(cross_rank),
        names.CROSS_SIZE: str(cross_size),
    })
    env.pop(names.ELASTIC_WORKER, None)  # a job started from an elastic worker is not elastic
    return _with_aliases(env)


def elastic_worker_environment(
    base: Mapping[str, str],
    *,
    worker: int,
    rendezvous_address: str,
    secret: bytes,
    job_id: str,
    start_timeout: float,
    elastic_timeout: float,
    hostname: str,
) -> Dict[str, str]:
    """Builds the environment of one worker of an elastic job.

    Such a worker has no fixed rank: it gets its number in the job
    (:data:`~ring_strategy._contracts.ELASTIC_WORKER`) and learns its place in
    each world from the driver's store when it calls ``init()``. Layout
    variables of ``base`` are left out.

    Args:
        base: The environment to start from (ringrun's own).
        worker: The worker's number, in launch order from 0.
        rendezvous_address: ``host:port`` of the driver's store.
        secret: The job secret.
        job_id: The job id.
        start_timeout: Seconds the workers of one world may take to find each other.
        elastic_timeout: Seconds the worker may wait for its next world.
        hostname: The host the worker was placed on.

    Returns:
        A new environment mapping.
    """
    layout = set(names.LAYOUT_VARIABLES) | set(names.HOROVOD_ALIASES)
    env = _job_variables({k: v for k, v in base.items() if k not in layout},
                         rendezvous_address=rendezvous_address, secret=secret, job_id=job_id,
                         start_timeout=start_timeout, hostname=hostname)
    env[names.ELASTIC_WORKER] = str(worker)
    env[names.ELASTIC_TIMEOUT] = f"{elastic_timeout:g}"
    return _with_aliases(env)


def _job_variables(base: Mapping[str, str], *, rendezvous_address: str, secret: bytes, job_id: str,
                   start_timeout: float, hostname: str) -> Dict[str, str]:
    """``base`` with what every worker of a job shares, whatever its place."""
    env = dict(base)
    env.update({
        names.RENDEZVOUS_ADDR: rendezvous_address,
        names.SECRET: secret.hex(),
        names.JOB_ID: names.check_job_id(job_id),
        names.HOSTNAME: hostname,
        names.START_TIMEOUT: f"{start_timeout:g}",
        # Prompt, whole lines from Python workers (and any Python they start).
        "PYTHONUNBUFFERED": "1",
    })
    return env


def _with_aliases(env: Dict[str, str]) -> Dict[str, str]:
    """Adds Horovod's name of each worker variable ``env`` has."""
    env.update({alias: env[ours] for alias, ours in names.HOROVOD_ALIASES.items() if ours in env})
    return env


def forwarded_environment(environ: Mapping[str, str]) -> Dict[str, str]:
    """Returns the variables of ringrun's environment that remote workers get too.

    Everything but what describes ringrun's own host or session (``HOME``,
    ``HOSTNAME``, ``PWD``, ``SSH_*``, ``TMPDIR``, ``RING_ADVERTISE_HOST``, ...),
    as ``horovodrun`` forwards its environment. ``PATH`` and ``PYTHONPATH`` are
    forwarded: the hosts of a job are expected to share their software layout.

    Args:
        environ: ringrun's environment.

    Returns:
        A new mapping.
    """
    return {
        k: v for k, v in environ.items()
        if k not in _HOST_ONLY and not k.startswith(_HOST_ONLY_PREFIXES)
    }
