"""The environment of a worker started by ``torchrun`` (torch.distributed.run)."""

from __future__ import annotations

import os
from typing import Mapping

from ring_strategy.environments.base import override
from ring_strategy.environments.external import ExternalLauncherEnvironment, Layout, read_int, require_int

__all__ = ["TorchrunEnvironment"]

_REQUIRED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class TorchrunEnvironment(ExternalLauncherEnvironment):
    """Reads the variables torchrun gives each worker.

    ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` place the
    process; ``GROUP_RANK`` and ``GROUP_WORLD_SIZE`` (torchrun's node rank and
    number of nodes) give the host index and count, else they follow from
    ``RANK // LOCAL_WORLD_SIZE`` and ``WORLD_SIZE // LOCAL_WORLD_SIZE``.

    Rank 0 serves the rendezvous store on ``MASTER_ADDR`` (``127.0.0.1`` on one
    host) at port ``MASTER_PORT + 1``: torchrun's own store already listens on
    ``MASTER_PORT``. ``RING_RENDEZVOUS_PORT`` or ``RING_RENDEZVOUS_ADDR``
    override it; across hosts ``MASTER_ADDR`` must be rank 0's host, as with
    ``--master-addr`` (with ``--rdzv-backend=c10d`` the store's host may be
    another one: then set ``RING_RENDEZVOUS_ADDR``).

    The job id and, unless ``RING_SECRET`` is set, the secret are derived from
    ``TORCHELASTIC_RUN_ID``, ``MASTER_ADDR``, ``MASTER_PORT`` and
    ``TORCHELASTIC_RESTART_COUNT``, so each restart is a new job. torchrun
    makes a random run id unless ``--rdzv-id`` names one, but such a derived
    secret only keeps jobs apart: export a random ``RING_SECRET`` (hex) for
    protection against other users.

    Args:
        environ: The variables to read; defaults to ``os.environ``.

    Raises:
        ValueError: If a variable is missing or invalid.

    Example:
        >>> env = TorchrunEnvironment({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
        ...     "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "29500"})
        >>> env.rank, env.size, env.rendezvous_address
        (1, 2, '127.0.0.1:29501')
    """

    launcher = "torchrun"

    @classmethod
    @override
    def detect(cls) -> bool:
        return all(name in os.environ for name in _REQUIRED)

    @override
    def _layout(self, env: Mapping[str, str]) -> Layout:
        rank = require_int(env, self.launcher, "RANK")
        size = require_int(env, self.launcher, "WORLD_SIZE")
        local_rank = require_int(env, self.launcher, "LOCAL_RANK")
        local_size = read_int(env, "LOCAL_WORLD_SIZE")
        if local_size is None:
            local_size = size
        cross_rank = read_int(env, "GROUP_RANK")
        cross_size = read_int(env, "GROUP_WORLD_SIZE")
        if cross_rank is None or cross_size is None:
            cross_rank, cross_size = rank // max(local_size, 1), max(size // max(local_size, 1), 1)
        return Layout(rank, size, local_rank, local_size, cross_rank, cross_size)

    @override
    def _job_key(self, env: Mapping[str, str], layout: Layout) -> str:
        names = ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT")
        return "|".join([*(env.get(n, "") for n in names), str(layout.size)])

    @override
    def _rendezvous_host(self, env: Mapping[str, str]) -> str:
        return env["MASTER_ADDR"].strip("[]")

    @override
    def _default_port(self, env: Mapping[str, str], key: str) -> int:
        port = require_int(env, self.launcher, "MASTER_PORT")
        return port + 1 if port < 65535 else port - 1
