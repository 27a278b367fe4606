"""The environment of a process started without any launcher."""

from __future__ import annotations

import secrets
import socket
from typing import Optional

from ring_strategy.environments.base import ClusterEnvironment, override

__all__ = ["LocalEnvironment"]


class LocalEnvironment(ClusterEnvironment):
    """A job of one process: ``python train.py`` with no launcher.

    Always detected, so it comes last in the detection order. There is no
    rendezvous store and no secret; the job id is random for each instance.
    """

    def __init__(self) -> None:
        self._job_id = secrets.token_hex(8)
        self._host_id = socket.gethostname()

    @classmethod
    @override
    def detect(cls) -> bool:
        return True

    @property
    @override
    def rank(self) -> int:
        return 0

    @property
    @override
    def size(self) -> int:
        return 1

    @property
    @override
    def local_rank(self) -> int:
        return 0

    @property
    @override
    def local_size(self) -> int:
        return 1

    @property
    @override
    def cross_rank(self) -> int:
        return 0

    @property
    @override
    def cross_size(self) -> int:
        return 1

    @property
    @override
    def rendezvous_address(self) -> Optional[str]:
        return None

    @property
    @override
    def secret(self) -> Optional[bytes]:
        return None

    @property
    @override
    def job_id(self) -> str:
        return self._job_id

    @property
    @override
    def host_id(self) -> str:
        return self._host_id
