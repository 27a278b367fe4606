"""The examples run end to end through ringrun."""

from __future__ import annotations

import re
import sys


def test_numpy_logreg_trains_and_keeps_replicas_identical(ringrun):
    result = ringrun(2, [sys.executable, "examples/numpy_logreg.py", "--epochs", "21"], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    losses = [float(x) for x in re.findall(r"^\[0\] epoch +\d+ +loss ([\d.]+)$", result.stdout, re.M)]
    assert len(losses) == 3 and losses[0] > losses[1] > losses[2], result.stdout
    assert "[0] parameters identical on all 2 workers: True" in result.stdout
    assert not re.search(r"^\[1\] ", result.stdout, re.M)  # only rank 0 reports


def test_adasum_small_model_prints_both_losses(ringrun):
    result = ringrun(2, [sys.executable, "examples/adasum_small_model.py", "--epochs", "2"], timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = re.findall(r"^\[0\] epoch +\d+  loss adasum ([\d.]+)  average ([\d.]+)$", result.stdout, re.M)
    assert len(rows) == 2, result.stdout
    assert all(float(a) < 1.0 and float(b) < 1.0 for a, b in rows), result.stdout
    assert float(rows[1][0]) < float(rows[0][0]), result.stdout  # Adasum training makes progress


def test_elastic_torch_trains_under_plain_ringrun(ringrun):
    result = ringrun(2, [sys.executable, "examples/elastic_torch.py", "--epochs", "2", "--samples", "512",
                         "--batches-per-commit", "3"], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    losses = [float(x) for x in re.findall(r"^\[0\] epoch \d+: loss ([\d.]+) on 2 worker\(s\)$", result.stdout, re.M)]
    assert len(losses) == 2 and losses[0] > losses[1], result.stdout
    assert "[0] parameters identical on all 2 workers: True" in result.stdout
    assert "reset" not in result.stdout, result.stdout


def test_readme_pytorch_snippet_runs_under_ringrun(ringrun, tmp_path):
    """The README's PyTorch section is a script a user can copy as it is."""
    from tests.jobs import REPO_ROOT

    section = (REPO_ROOT / "README.md").read_text().split("\n## PyTorch\n", 1)[1]
    script = tmp_path / "train.py"
    script.write_text(re.search(r"```python\n(.*?)```", section, re.S).group(1))
    result = ringrun(2, [sys.executable, str(script)], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    losses = {int(r): float(x) for r, x in re.findall(r"^\[\d\] rank (\d) of 2: loss ([\d.]+)$", result.stdout, re.M)}
    assert sorted(losses) == [0, 1] and all(x < 1.0 for x in losses.values()), result.stdout
