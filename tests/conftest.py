"""Shared pytest fixtures.

Multi-process tests launch real workers exactly as users do, through
:mod:`tests.jobs` (ringrun as a real process, one timeout behaviour).

``make test`` runs the suite in two parts: the tests not marked ``serial``
two files at a time (pytest-xdist, ``-n 2 --dist loadfile``), then the
``serial`` ones three groups at a time (``--dist loadgroup``, scheduled here):
:mod:`tests.serial` says which.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, List, Mapping, Optional

import pytest

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # `pytest` rather than `python -m pytest`
    sys.path.append(str(Path(__file__).resolve().parents[1]))

from tests.jobs import REPO_ROOT, JobResult, run_ringrun  # noqa: E402
from tests.serial import group as serial_group  # noqa: E402
from tests.serial import is_serial  # noqa: E402

__all__ = ["REPO_ROOT", "ringrun_output", "run_ringrun"]

_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Marks the tests :mod:`tests.serial` lists ``serial``."""
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if path.is_relative_to(_TESTS) and is_serial(path.relative_to(_TESTS).as_posix()):
            item.add_marker(pytest.mark.serial)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> Optional[object]:
    """``-n N --dist loadgroup`` (make test's serial part): one file at a
    time per worker, but a serial test's whole group (:func:`tests.serial.group`,
    multihost/'s files) as one unit. pytest-xdist's own loadgroup cannot
    group here: it renames node ids, which pytest 9 no longer reads."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SerialGroups(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            relative = path.removeprefix("tests/")
            return serial_group(relative) if is_serial(relative) else path

    return SerialGroups(config, log)


def ringrun_output(np: int, args: List[str], env: Optional[Mapping[str, str]] = None, timeout: float = 240) -> str:
    """Runs ``ringrun -np NP ARGS...`` and returns its stdout and stderr
    together, headed by ``[ringrun exit code N]``.

    A timeout does not fail the test by itself: the output then ends with a
    line saying the job was stopped, for tests that read one long run's
    output from several test functions.

    Args:
        np: Number of workers.
        args: The worker command, e.g. ``[sys.executable, "worker.py"]``.
        env: The whole environment (this checkout is added to PYTHONPATH);
            this process's environment when None.
        timeout: Seconds before the job is stopped.
    """
    result = run_ringrun(np, args, timeout=timeout, base=env, merge_output=True, fail_on_timeout=False)
    return f"[ringrun exit code {result.returncode}]\n{result.stdout}"


@pytest.fixture(scope="session")
def run_output() -> Callable[..., str]:
    """The function :func:`ringrun_output`."""
    return ringrun_output


@pytest.fixture
def ringrun() -> Callable[..., JobResult]:
    """The function :func:`tests.jobs.run_ringrun`: ``ringrun(np, args, env=None, timeout=120)``."""
    return run_ringrun


