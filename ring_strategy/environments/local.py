"""The environment of a process started without any launcher."""

from __future__ import annotations

import secrets
import socket

from ring_strategy.environments.base import ClusterEnvironment, Layout, override

__all__ = ["LocalEnvironment"]


class LocalEnvironment(ClusterEnvironment):
    """A job of one process: ``python train.py`` with no launcher.

    Always detected, so it comes last in the detection order. There is no
    rendezvous store and no secret; the job id is random for each instance.
    """

    def __init__(self) -> None:
        super().__init__(Layout(0, 1, 0, 1, 0, 1), rendezvous_address=None, secret=None,
                         job_id=secrets.token_hex(8), host_id=socket.gethostname())

    @classmethod
    @override
    def detect(cls) -> bool:
        return True
