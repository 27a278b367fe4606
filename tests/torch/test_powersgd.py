"""DistributedOptimizer(compression=hvd.PowerSGD(...)) at np=2
(workers/powersgd_worker.py): ranks stay identical, the loss falls, the
warm-up is uncompressed bit for bit, 1-D and small tensors stay uncompressed,
the bytes sent shrink, and the error feedback carries what compression left
out. Also the configuration's checks and the orthogonalization, here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.jobs import run_ringrun  # noqa: E402

WORKER = Path(__file__).parent / "workers" / "powersgd_worker.py"


def test_powersgd_trains_identical_ranks_with_error_feedback():
    result = run_ringrun(2, [sys.executable, WORKER], timeout=120, drop_ring=True, merge_output=True)
    out = result.stdout
    assert result.returncode == 0, out[-8000:]
    reports = [json.loads(line.partition("RESULT ")[2]) for line in out.splitlines() if "RESULT " in line]
    assert sorted(r["rank"] for r in reports) == [0, 1], out[-8000:]
    for r in reports:
        assert r["identical"] and r["warmup_bitwise"] and r["differs_after_warmup"], r
        losses = r["powersgd_losses"]
        assert losses[-1] < 0.4 * losses[0], losses
        assert r["steps"] == 30
        assert r["compressed"] == {"0.weight": True, "0.bias": False, "2.weight": True, "2.bias": False,
                                   "4.weight": True, "4.bias": False}
        assert r["sent_bytes"] < r["dense_bytes"] / 8, (r["sent_bytes"], r["dense_bytes"])
        carried, left_out = r["error_feedback"]
        assert carried < 1e-5 and left_out > 0.1, r["error_feedback"]
    assert reports[0]["powersgd_losses"] == reports[1]["powersgd_losses"]


def test_configuration_is_checked_and_orthogonalize_gives_orthonormal_columns():
    import ring_strategy.torch as hvd
    from ring_strategy.torch.powersgd import orthogonalize

    with pytest.raises(ValueError, match=r"rank should be an integer >= 1. Got: 0"):
        hvd.PowerSGD(rank=0)
    with pytest.raises(ValueError, match=r"warmup_steps should be an integer >= 0. Got: 1.5"):
        hvd.PowerSGD(warmup_steps=1.5)
    with pytest.raises(ValueError, match="leave op and gradient_predivide_factor at their defaults"):
        hvd.DistributedOptimizer(torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=1),
                                 compression=hvd.PowerSGD(), op=hvd.Sum)
    m = torch.randn(30, 4, generator=torch.Generator().manual_seed(0))
    orthogonalize(m)
    assert torch.allclose(m.t() @ m, torch.eye(4), atol=1e-5)
