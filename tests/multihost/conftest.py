"""Fixtures of the multi-host tests: hosts made of network namespaces, each with an sshd."""

from __future__ import annotations

from typing import Iterator

import pytest

from .netns import Cluster, missing_requirement


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three namespace hosts, 10.99.0.10 to .12, each running an sshd."""
    reason = missing_requirement()
    if reason is not None:
        pytest.skip(f"multi-host tests: {reason}")
    hosts = Cluster(tmp_path_factory.mktemp("netns"), count=3)
    hosts.start()
    try:
        yield hosts
    finally:
        hosts.stop()
