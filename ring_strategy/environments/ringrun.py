"""The environment of a worker started by ``ringrun``."""

from __future__ import annotations

import os
import secrets
import socket
from typing import Mapping, Optional

from ring_strategy import _config_values, _contracts as names
from ring_strategy.environments.base import ClusterEnvironment, Layout, override

__all__ = ["RingrunEnvironment"]


class RingrunEnvironment(ClusterEnvironment):
    """Reads the ``RING_*`` variables that ``ringrun`` gives each worker.

    ``RING_RANK`` and ``RING_SIZE`` are required. For a job of more than one
    process ``RING_RENDEZVOUS_ADDR`` (``host:port``), ``RING_SECRET`` (hex) and
    ``RING_JOB_ID`` are required too. ``RING_LOCAL_RANK`` and
    ``RING_LOCAL_SIZE`` default to the global values, ``RING_CROSS_RANK`` and
    ``RING_CROSS_SIZE`` to 0 and 1, ``RING_HOSTNAME`` to this host's name.
    Every value is checked when the object is made.

    Args:
        environ: The variables to read; defaults to ``os.environ``.

    Raises:
        ValueError: If a variable is missing or invalid; the message names the
            variable and quotes the bad value.

    Example:
        >>> env = RingrunEnvironment({"RING_RANK": "0", "RING_SIZE": "1"})
        >>> env.rank, env.size
        (0, 1)
    """

    def __init__(self, environ: Optional[Mapping[str, str]] = None) -> None:
        env = os.environ if environ is None else environ
        size = _int(env, names.SIZE, minimum=1)
        rank = _int(env, names.RANK, minimum=0, below=(names.SIZE, size))
        local_size = _int(env, names.LOCAL_SIZE, minimum=1, default=size)
        if local_size > size:
            raise ValueError(f"{names.LOCAL_SIZE} should be at most {names.SIZE}={size}. Got: {env.get(names.LOCAL_SIZE)!r}")
        local_rank = _int(env, names.LOCAL_RANK, minimum=0, default=rank, below=(names.LOCAL_SIZE, local_size))
        cross_size = _int(env, names.CROSS_SIZE, minimum=1, default=1)
        cross_rank = _int(env, names.CROSS_RANK, minimum=0, default=0, below=(names.CROSS_SIZE, cross_size))
        needed = size > 1
        super().__init__(
            Layout(rank, size, local_rank, local_size, cross_rank, cross_size),
            rendezvous_address=_address(env, names.RENDEZVOUS_ADDR, required=needed),
            secret=_secret(env, names.SECRET, required=needed),
            job_id=_job_id(env, required=needed),
            host_id=env.get(names.HOSTNAME) or socket.gethostname(),
        )

    @classmethod
    @override
    def detect(cls) -> bool:
        return names.RANK in os.environ or names.SIZE in os.environ


def _job_id(env: Mapping[str, str], *, required: bool) -> str:
    job_id = env.get(names.JOB_ID)
    if job_id is None:
        if required:
            raise ValueError(f"{names.JOB_ID} is not set; start the job with ringrun")
        return secrets.token_hex(8)
    return names.check_job_id(job_id)


def _int(
    env: Mapping[str, str],
    name: str,
    *,
    minimum: int,
    default: Optional[int] = None,
    below: Optional[tuple[str, int]] = None,
) -> int:
    raw = env.get(name)
    if raw is None:
        if default is None:
            raise ValueError(f"{name} is not set; start the job with ringrun")
        value = default
    else:
        value = _config_values.integer("an integer").value(name, raw)
    if value < minimum:
        raise ValueError(f"{name} should be at least {minimum}. Got: {raw!r}")
    if below is not None and value >= below[1]:
        raise ValueError(
            f"{name} should be less than {below[0]}={below[1]}. "
            f"Got: {raw if raw is not None else value!r}"
        )
    return value


def _address(env: Mapping[str, str], name: str, *, required: bool) -> Optional[str]:
    raw = env.get(name)
    if raw is None:
        if required:
            raise ValueError(f"{name} is not set; start the job with ringrun")
        return None
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{name} should look like 'host:port'. Got: {raw!r}")
    return raw


def _secret(env: Mapping[str, str], name: str, *, required: bool) -> Optional[bytes]:
    raw = env.get(name)
    if raw is None:
        if required:
            raise ValueError(f"{name} is not set; start the job with ringrun")
        return None
    try:
        secret = bytes.fromhex(raw)
    except ValueError:
        secret = b""
    if not secret:
        # Unlike the other variables, the value is not quoted: it is a secret.
        raise ValueError(
            f"{name} should be a non-empty even number of hexadecimal digits. "
            f"Got: a value of {len(raw)} characters that is not"
        )
    return secret
