"""TensorFlow's op library (ring_strategy.tensorflow.native_ops): the
many-collectives TF1 graph at np=2 and np=4 on real workers, the build on
first use into the per-user cache (a stamp of another TensorFlow makes it
rebuild) and the fallback with its warning when nothing can be built.
The other TensorFlow tests run their scenarios through the ops, and once
more through the forced fallback (RING_NATIVE_OPS=0).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers.checks import passed_ranks

pytest.importorskip("tensorflow")
WORKER = Path(__file__).parent / "workers" / "tf1_many_collectives.py"


@pytest.mark.parametrize("np_", [2, 4])
def test_many_collectives_in_one_session_run(np_, run_output):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RING_")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1")
    out = run_output(np_, [sys.executable, str(WORKER)], env=env, timeout=180)
    assert set(passed_ranks(out, "many_collectives")) == {str(r) for r in range(np_)}, out[-6000:]
    assert out.count("native (op library") == np_, out[-6000:]


def test_cache_build_and_rebuild_for_another_tensorflow(tmp_path):
    """A cached library whose stamp names another TensorFlow is rebuilt,
    with one line saying why, and then loads."""
    import tensorflow as tf

    from ring_strategy import _op_build

    folder = tmp_path / "tf-ops" / f"ring{_op_build.RING_VERSION}-tf{tf.__version__}"
    folder.mkdir(parents=True)
    (folder / _op_build.library_name(tf.__version__)).write_bytes(b"not a library")
    (folder / "stamp.json").write_text(json.dumps({"tensorflow": "2.0.0", "ring": _op_build.RING_VERSION}))
    code = ("import tensorflow as tf; from ring_strategy import _op_build; "
            "p = _op_build.cached_library(tf.__version__); tf.load_op_library(str(p)); print('loaded', p)")
    # Without the XLA lowering (RING_TF_XLA=0), which doubles the compile time.
    env = dict(os.environ, RING_CACHE_DIR=str(tmp_path), TF_CPP_MIN_LOG_LEVEL="2", RING_TF_XLA="0")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ring: building the TensorFlow ops" in done.stderr and "'2.0.0'" in done.stderr, done.stderr[-3000:]
    assert "loaded" in done.stdout
    stamp = json.loads((folder / "stamp.json").read_text())
    assert stamp["tensorflow"] == tf.__version__ and stamp["xla"] is False


def test_no_compiler_falls_back_with_the_reason(tmp_path, monkeypatch):
    from ring_strategy import _native_ops, _op_build

    monkeypatch.setenv("RING_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_op_build, "library_name", lambda v: "_tf_ops_not_packaged.so")

    def no_compiler():
        raise _op_build.BuildError("no C++ compiler found (set CXX, or install g++)")

    monkeypatch.setattr(_op_build, "compiler", no_compiler)
    _native_ops.forget()
    try:
        with pytest.warns(RuntimeWarning, match="host calls.*no C\\+\\+ compiler"):
            assert _native_ops.native("tensorflow") is None
        assert _native_ops.describe("tensorflow").startswith("host calls (no C++ compiler")
    finally:
        _native_ops.forget()


def test_switch_forces_host_calls(monkeypatch):
    from ring_strategy import _native_ops

    monkeypatch.setenv("RING_NATIVE_OPS", "0")
    _native_ops.forget()
    try:
        assert _native_ops.native("tensorflow") is None
        assert "RING_NATIVE_OPS=0" in _native_ops.describe("tensorflow")
    finally:
        _native_ops.forget()


XLA_WORKER = Path(__file__).parent / "workers" / "tf_xla_worker.py"


def test_collectives_compiled_by_xla(run_output):
    """jit_compile=True functions reduce through ring's XLA custom call."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RING_")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1")
    out = run_output(2, [sys.executable, str(XLA_WORKER)], env=env, timeout=180)
    for check in ("many", "gradient", "unequal_rows", "scatter"):
        assert set(passed_ranks(out, check)) == {"0", "1"}, f"{check}:\n{out[-6000:]}"


def test_build_script_lists_its_inputs_and_needs_a_folder():
    """``_op_build.py --inputs`` (the Makefile's prerequisites) names the
    script and every source and header it compiles; building needs --into."""
    from ring_strategy import _op_build

    script = Path(_op_build.__file__)
    done = subprocess.run([sys.executable, str(script), "--inputs"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split()
    names = _op_build.TF_SOURCES + _op_build.XLA_SOURCES + _op_build.TF_HEADERS
    assert len(listed) == 1 + len(names) and Path(listed[0]).resolve() == script.resolve()
    assert all(Path(p).is_file() for p in listed) and all(p.endswith(n) for p, n in zip(listed[1:], names))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--into is required" in done.stderr
