"""How the elastic-state tests run their worker scripts: ``ringrun -np 2``
(no elastic launcher, so a reset re-forms the same two ranks) and a reading
of the ``<rank>: <what> <value>`` lines the scripts print."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence

from tests.jobs import run_ringrun

RANKS = 2


def train(worker: Path, options: Sequence[str], fields: Sequence[str], last: str, same: Sequence[str],
          env: Optional[Mapping[str, str]] = None) -> Dict[str, Dict[int, str]]:
    """Runs ``worker`` with ``options`` on :data:`RANKS` ranks; it must exit
    0, every rank must print its ``last`` line, and every rank that prints
    one of the fields ``same`` (final weights' digests) the same value.

    Returns:
        {field: {rank: value}} for each of ``fields`` and ``last``.
    """
    proc = run_ringrun(RANKS, [sys.executable, worker, *options], env=env, timeout=240, drop_ring=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    names = "|".join(re.escape(f) for f in [*fields, last])
    found: Dict[str, Dict[int, str]] = {}
    for rank, what, value in re.findall(rf"^(?:\[\d+\] )?(\d+): ({names}) ?(.*)$", proc.stdout, re.M):
        found.setdefault(what, {})[int(rank)] = value
    assert set(found.get(last, {})) == set(range(RANKS)), out[-6000:]
    for field in same:
        assert len(set(found.get(field, {}).values())) <= 1, f"ranks differ: {field} {found[field]}"
    return found
