"""The training-script side of elastic PyTorch on real workers (``ringrun
-np 2``, no elastic launcher: a reset re-forms the same two ranks).

One script (workers/elastic_torch_train.py) trains without elastic (the
reference) and with ``hvd.elastic.run`` / ``TorchState`` / ``ElasticSampler``;
the script itself drives the loop's exits at chosen steps. Every elastic run
must end with the reference's parameters, bit for bit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest

from tests.elastic_state.elastic_jobs import train

WORKER = Path(__file__).parent / "workers" / "elastic_torch_train.py"
STEPS = 12  # 2 epochs of 48 samples, 4 per rank a step
COMMIT_EVERY = 3


def _train(*options: str) -> Dict[str, Dict[int, str]]:
    return train(WORKER, options, ["params", "steps run", "steps", "syncs", "resets", "commits"], "seen",
                 same=["params"])


@pytest.fixture(scope="module")
def reference() -> str:
    """The final parameters of the script without elastic."""
    return _train()["params"][0]


def _commits(found: Dict[str, Dict[int, str]]) -> list:
    return [int(s) for s in found["commits"][0].split(",") if s]


def test_elastic_script_equals_the_plain_one(reference):
    """Issue 18, acceptance 9: under plain ringrun the elastic script gives
    bitwise the plain one's result; one sync, no reset."""
    found = _train("--elastic")
    assert found["params"][0] == reference
    assert found["syncs"] == {0: "1", 1: "1"}
    assert found["resets"] == {0: "", 1: ""}
    assert _commits(found) == list(range(COMMIT_EVERY, STEPS + 1, COMMIT_EVERY))


@pytest.mark.parametrize("skip_sync", [1, pytest.param(0, marks=pytest.mark.slow)])
def test_hosts_updated_on_rank_0_resets_every_rank(reference, skip_sync):
    """Rank 0 alone hears of new hosts at the commit after step 3: every rank
    raises HostsUpdatedInterrupt there, resets once, syncs again only when
    skip_sync is False, and trains on to the reference's result with no
    step redone."""
    found = _train("--elastic", "--host-update", f"3:{skip_sync}")
    assert found["resets"] == {0: "3", 1: "3"}
    syncs = "1" if skip_sync else "2"
    assert found["syncs"] == {0: syncs, 1: syncs}
    assert found["steps run"] == {0: str(STEPS), 1: str(STEPS)}
    assert found["params"][0] == reference


def test_internal_error_rolls_back_to_the_last_commit(reference):
    """Every rank raises HorovodInternalError in step 8 (gradients in
    flight): the state goes back to the commit after step 6, steps 7 and 8
    are trained again, no commit is lost or repeated."""
    found = _train("--elastic", "--raise", "7:internal,internal")
    assert found["resets"] == {0: "6", 1: "6"}
    assert found["syncs"] == {0: "2", 1: "2"}
    commits = _commits(found)
    assert commits == sorted(set(commits)) and commits[-1] == STEPS, commits  # strictly increasing
    assert commits == list(range(COMMIT_EVERY, STEPS + 1, COMMIT_EVERY))  # none lost, none repeated
    assert found["steps"] == {0: str(STEPS), 1: str(STEPS)}
    assert found["steps run"] == {0: str(STEPS + 1), 1: str(STEPS + 1)}
    assert found["params"][0] == reference


def test_ranks_decide_together_whether_to_sync(reference):
    """Rank 0 may skip the sync (hosts only added) while rank 1 must sync
    (it lost a peer): both sync, instead of rank 1 waiting alone in the
    sync's broadcasts, and training ends at the reference."""
    found = _train("--elastic", "--raise", "4:hosts-skip,internal")
    assert found["syncs"] == {0: "2", 1: "2"}
    assert found["resets"] == {0: "4", 1: "3"}
    assert found["params"][0] == reference
