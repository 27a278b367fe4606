"""docs/support.md stays true: every clause of its front-end tables is checked
against the installed front ends.

The page's tables whose columns are the six front ends are parsed here; each
cell is clauses separated by ``;``, and a clause ``<marker>: `name`, ...``
(markers: yes, no, NotImplementedError, BadArgumentError, returns False) is
checked by tests/workers/support_doc.py in a world of one, in one fresh
interpreter. A front end whose framework is not installed is left out (MXNet
needs an environment of its own, as in tests/test_imports.py).
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

REPO_ROOT = Path(__file__).resolve().parents[1]
PAGE = REPO_ROOT / "docs" / "support.md"
WORKER = REPO_ROOT / "tests" / "workers" / "support_doc.py"
FRONT_ENDS = ["numpy core", "PyTorch", "TensorFlow", "Keras 3", "Lightning", "MXNet"]
FRAMEWORKS = {"PyTorch": "torch", "TensorFlow": "tensorflow", "Keras 3": "keras",
              "Lightning": "pytorch_lightning", "MXNet": "mxnet"}
MARKER = re.compile(r"^(yes|no|NotImplementedError|BadArgumentError|returns False):(.*)$", re.S)
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# Rows the page must keep (the features issue 19 asks it to cover).
REQUIRED_ROWS = ["allreduce", "grouped allreduce", "in-place forms", "async forms, poll, synchronize", "join",
                 "Adasum ([docs/adasum.md](adasum.md))", "broadcast_object, allgather_object", "SyncBatchNorm",
                 "process_set= on collectives", "elastic training", "GPUs, NCCL",
                 "Adasum in optimizers"]


def _cells(line: str) -> List[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _rows(text: str) -> List[List[str]]:
    """The rows of every table whose header is ``feature`` and the six front ends."""
    rows, in_table = [], False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        cells = _cells(line)
        if cells[1:] == FRONT_ENDS:
            in_table = True
        elif in_table and not set(line) <= set("|- "):
            assert len(cells) == 1 + len(FRONT_ENDS), f"a row needs {1 + len(FRONT_ENDS)} cells: {line}"
            rows.append(cells)
    return rows


def _clauses(rows: List[List[str]]) -> List[Dict]:
    clauses = []
    for feature, *cells in rows:
        for front_end, cell in zip(FRONT_ENDS, cells):
            for clause in cell.split(";"):
                names = re.findall(r"`([^`]*)`", clause)
                marker = MARKER.match(clause.strip())
                where = f"{front_end}, {feature!r}: {clause.strip()!r}"
                if marker is None:
                    assert not names, f"names in backticks only after a marker ('yes:', 'no:', ...): {where}"
                    continue
                assert names, f"a marker lists names in backticks: {where}"
                assert all(NAME.match(n) for n in names), f"a name in backticks is not a (dotted) name: {where}"
                clauses.append({"front_end": front_end, "feature": feature, "marker": marker.group(1),
                                "names": names})
    return clauses


def _installed(front_end: str) -> bool:
    framework = FRAMEWORKS.get(front_end)
    return framework is None or importlib.util.find_spec(framework) is not None


def test_support_page_tables_parse():
    rows = _rows(PAGE.read_text())
    features = [row[0] for row in rows]
    assert not set(REQUIRED_ROWS) - set(features), set(REQUIRED_ROWS) - set(features)
    clauses = _clauses(rows)
    for front_end in FRONT_ENDS:
        assert sum(len(c["names"]) for c in clauses if c["front_end"] == front_end) >= 4, front_end


def test_support_page_matches_the_front_ends():
    clauses = [c for c in _clauses(_rows(PAGE.read_text())) if _installed(c["front_end"])]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RING_", "HOROVOD_"))}
    env.update(KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(REPO_ROOT)]))
    proc = subprocess.run([sys.executable, str(WORKER)], input=json.dumps(clauses), env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["checked"] == sum(len(c["names"]) for c in clauses), result
    assert not result["problems"], "docs/support.md says what is not true:\n" + "\n".join(result["problems"])
