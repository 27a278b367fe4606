"""The tests ``make test`` runs after the rest, apart from the framework
tests that keep both cores busy: those whose verdict depends on elapsed time
or on the machine as a whole. They mostly wait (a third of the CPUs busy,
measured), so three groups run at once: each entry of ``SERIAL`` is one group
(``group``), a folder's files in one. tests/conftest.py marks them
``serial`` and schedules them by group; ``python -m tests.serial`` prints their
paths, so that the Makefile's serial part collects only them.
"""

from __future__ import annotations

from typing import List

# Paths relative to tests/, a folder ending in "/": clock jumps, lost peers'
# deadlines, stall warnings, signals, delayed and tampered links (reliability/),
# shaped links and namespace hosts on 10.99.0.0/24 (multihost/), autotune's
# timings, elastic jobs whose training races a discovery change, and the
# store's and launcher's response-time bounds.
SERIAL = (
    "multihost/", "autotune/", "elastic/test_elastic_launch.py", "test_store.py", "test_launcher.py",
    *(f"reliability/test_{name}.py" for name in ("clock_jump", "lost_peers", "security", "signals", "stall", "tampering")),
)


def is_serial(relative: str) -> bool:
    """Whether the test file at ``relative`` (to tests/, with "/") is serial."""
    return relative.startswith(SERIAL)


def group(relative: str) -> str:
    """The entry of ``SERIAL`` that the serial test file at ``relative``
    falls under: the serial part runs one group at a time per pytest-xdist
    worker (tests/conftest.py's scheduler; three groups at once), so a
    folder's files (multihost/'s one subnet) never overlap."""
    return next(entry for entry in SERIAL if relative.startswith(entry))


def paths() -> List[str]:
    """The serial files and folders, relative to the repository root."""
    return [f"tests/{p.rstrip('/')}" for p in SERIAL]


if __name__ == "__main__":
    print(" ".join(paths()))
