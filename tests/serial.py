"""The tests ``make test`` runs alone, after running the rest two files at a
time (pytest-xdist): those whose verdict depends on elapsed time or on the
machine as a whole. tests/conftest.py marks them ``serial``;
``python -m tests.serial`` prints their paths, so that the Makefile's serial
part collects only them.
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


def paths() -> List[str]:
    """The serial files and folders, relative to the repository root."""
    return [f"tests/{p.rstrip('/')}" for p in SERIAL]


if __name__ == "__main__":
    print(" ".join(paths()))
