"""``ringrun --check-build`` on this installation, and with broken frameworks first on the path."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import textwrap
from pathlib import Path
from typing import Dict, Optional

import ring_strategy
from ring_strategy.runner.check_build import FRAMEWORKS, installed_version
from tests.jobs import run_ringrun


def _check_build(extra_path: Optional[Path] = None, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Runs ``ringrun --check-build`` with ``extra_path`` (also the working directory) on the path."""
    extra = dict(env or {})
    if extra_path is not None:
        extra["PYTHONPATH"] = os.pathsep.join(p for p in (str(extra_path), os.environ.get("PYTHONPATH")) if p)
    return run_ringrun(None, ["--check-build"], env=extra, timeout=300, cwd=extra_path)


def _row(out: str, name: str) -> str:
    for line in out.splitlines():
        if re.match(rf"^    \[[X ]\] {re.escape(name)}(\s|$)", line):
            return line
    raise AssertionError(f"no row for {name!r} in:\n{out}")


def test_report_of_this_installation() -> None:
    result = _check_build()
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"ring v{ring_strategy.__version__}:\n")
    for section in ("Available frameworks:", "Available transports:", "Available launchers:",
                    "Available tensor operations:"):
        assert f"\n{section}\n" in out
    for name, module, distributions in FRAMEWORKS:
        row = _row(out, name)
        if importlib.util.find_spec(module) is None:
            assert row.startswith("    [ ]") and row.endswith("not installed")
        else:
            assert row.startswith("    [X]"), row
            assert installed_version(distributions).split("+")[0] in row
    if importlib.util.find_spec("keras") is not None:
        assert re.search(r"\(backend: \w+\)", _row(out, "Keras"))
    assert _row(out, "Shared memory").startswith("    [X]")
    assert _row(out, "TCP").startswith("    [X]")
    assert _row(out, "CPU ring").startswith("    [X]")
    nccl = _row(out, "NCCL")
    assert nccl.startswith("    [ ]") and "no NCCL library found" in nccl and "libnccl.so.2" in nccl, nccl
    cuda = _row(out, "CUDA")
    assert cuda.startswith("    [ ]") and "libcuda.so.1" in cuda, cuda
    assert "Native engine: " in out and "_native" in out


BROKEN = {
    "torch": "import os\nos.abort()\n",
    "tensorflow": "raise ImportError('broken on purpose')\n",
    "keras": "raise ImportError('broken keras')\n",
    "jax": "raise RuntimeError('no devices')\n",
    "ray": "__version__ = '9.9.9'\n",
}


def _shadow_frameworks(directory: Path) -> None:
    """Packages named like the frameworks, to put first on the path: one crashes, some raise."""
    for name, code in BROKEN.items():
        (directory / name).mkdir()
        (directory / name / "__init__.py").write_text(textwrap.dedent(code))


def test_broken_frameworks_are_reported_not_fatal(tmp_path: Path) -> None:
    _shadow_frameworks(tmp_path)
    result = _check_build(tmp_path, env={"RING_TRANSPORT": "tcp"})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"\[ \] PyTorch .*import fails: the import crashed \(signal 6\)", out), out
    for name in ("PyTorch Lightning", "Lightning"):
        row = _row(out, name)
        if "not installed" not in row:  # torch is imported first in the same process
            assert row.startswith("    [ ]") and "not checked: importing torch failed" in row
    assert "import fails: ImportError: broken on purpose" in _row(out, "TensorFlow")
    assert "import fails: ImportError: broken keras" in _row(out, "Keras")
    assert "import fails: RuntimeError: no devices" in _row(out, "JAX")
    assert _row(out, "Ray").startswith("    [X] Ray") and "9.9.9" in _row(out, "Ray")
    assert _row(out, "CPU ring").startswith("    [X]")
    assert "turned off here by RING_TRANSPORT=tcp" in _row(out, "Shared memory")
