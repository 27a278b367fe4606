"""The timeline: written by rank 0 from RING_TIMELINE / ringrun
--timeline-filename / start_timeline(), valid JSON after shutdown, readable
after a crash, and drawn by the render tool."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.jobs import REPO_ROOT, run_ringrun
from ring_strategy.timeline import load, phases

WORKER = Path(__file__).with_name("worker.py")


def _run(tmp_path: Path, mode: str, *extra: str, ringrun_args=(), env=None) -> subprocess.CompletedProcess:
    return run_ringrun(2, [*ringrun_args, sys.executable, str(WORKER), mode, *extra], env=env, timeout=120,
                       cwd=tmp_path)


def test_ringrun_timeline_filename_writes_every_phase(tmp_path):
    trace = tmp_path / "trace.json"
    result = _run(tmp_path, "env", ringrun_args=["--timeline-filename", str(trace), "--timeline-mark-cycles"])
    assert result.returncode == 0, result.stderr
    events = json.loads(trace.read_text())  # valid JSON after shutdown
    spans = phases(events)
    grads = ("env.grad.0", "env.grad.1", "env.grad.2")
    grad = [p for name in grads for p, _, _ in spans[name]]
    for phase in ["NEGOTIATE_ALLREDUCE", "ALLREDUCE"]:
        assert phase in grad, grad
    algorithms = {"RING_ALLREDUCE", "DOUBLING_ALLREDUCE", "HALVING_DOUBLING_ALLREDUCE"}
    assert algorithms & set(grad), grad
    # Tensors submitted together are fused in at least one of the steps:
    # one allreduce, the same span in each tensor's row.
    rings = [{(s, e) for p, s, e in spans[name] if p in algorithms} for name in grads]
    assert set.intersection(*rings), rings
    assert [p for p, _, _ in spans["env.bcast"]][:3] == ["NEGOTIATE_BROADCAST", "BROADCAST", "CHAIN_BROADCAST"]

    assert "RING_ALLGATHER" in [p for p, _, _ in spans["env.gather"]]
    pid = next(e["pid"] for e in events if e.get("args", {}).get("name") == "env.grad.0")
    ticks = {e["name"] for e in events if e.get("pid") == pid and e.get("ph") == "i"}
    assert ticks == {"0", "1"}  # each rank's readiness inside the negotiation
    closing = [e for e in events if e.get("pid") == pid and e.get("ph") == "E" and e.get("name") == "ALLREDUCE"]
    assert closing and closing[0]["args"] == {"dtype": "float32", "shape": "[3, 4]"}
    assert any(e.get("name") == "CYCLE_START" for e in events)


def test_start_and_stop_at_run_time_cover_only_those_steps(tmp_path):
    trace = tmp_path / "runtime.json"
    result = _run(tmp_path, "runtime", str(trace))
    assert result.returncode == 0, result.stderr
    events = json.loads(trace.read_text())
    rows = set(phases(events))
    assert rows and all(name.startswith("during.") for name in rows), rows
    assert any(e.get("name") == "CYCLE_START" for e in events)


@pytest.mark.parametrize("how", [{"env": {"HOROVOD_TIMELINE": "DYNAMIC"}},
                                 {"ringrun_args": ["--timeline-filename", "DYNAMIC"]}],
                         ids=["HOROVOD_TIMELINE", "timeline-filename"])
def test_dynamic_timeline_writes_no_file_until_started(tmp_path, how):
    trace = tmp_path / "runtime.json"
    result = _run(tmp_path, "runtime", str(trace), **how)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runtime.json"]  # no file named DYNAMIC
    rows = set(phases(json.loads(trace.read_text())))
    assert rows and all(name.startswith("during.") for name in rows), rows


def test_timeline_of_a_crashed_job_is_readable_and_can_be_closed(tmp_path):
    trace = tmp_path / "crash.json"
    result = _run(tmp_path, "crash", ringrun_args=["--timeline-filename", str(trace)])
    assert result.returncode != 0
    events = load(trace)  # the closing bracket is missing; load() copes
    assert "crash.grad.0" in phases(events)
    tool = [sys.executable, "-m", "ring_strategy.timeline"]
    closed = subprocess.run([*tool, "close", str(trace)], cwd=REPO_ROOT, capture_output=True, text=True)
    assert closed.returncode == 0, closed.stderr
    assert json.loads(trace.read_text())
    png = tmp_path / "crash.png"
    drawn = subprocess.run([*tool, "render", str(trace), str(png)], cwd=REPO_ROOT, capture_output=True, text=True)
    assert drawn.returncode == 0, drawn.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_start_timeline_to_an_unwritable_path_is_a_clear_error(tmp_path):
    code = (
        "import ring_strategy as rs, ring_strategy.timeline as tl\n"
        "rs.init()\n"
        "try:\n"
        "    tl.start_timeline('/nonexistent-dir/trace.json')\n"
        "except rs.BadArgumentError as e:\n"
        "    print('error:', e)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert "error: cannot write the timeline to '/nonexistent-dir/trace.json'" in result.stdout, result.stderr


def test_render_draws_milliseconds_from_the_start_with_the_legend_beside():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from ring_strategy.timeline.render import figure

    t0 = 5_000_000.0  # µs since an arbitrary epoch, as the engine writes them
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "grad"}},
        {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "pid": 1, "ts": t0},
        {"ph": "i", "name": "0", "pid": 1, "ts": t0 + 100, "s": "p"},
        {"ph": "E", "name": "NEGOTIATE_ALLREDUCE", "pid": 1, "ts": t0 + 500},
        {"ph": "B", "name": "ALLREDUCE", "pid": 1, "ts": t0 + 500},
        {"ph": "E", "name": "ALLREDUCE", "pid": 1, "ts": t0 + 2500},
    ]
    fig = figure(events)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "time since the start of the trace (ms)"
    bars = sorted((p.get_x(), p.get_x() + p.get_width()) for p in ax.patches)
    assert bars == [pytest.approx((0.0, 0.5)), pytest.approx((0.5, 2.5))]
    fig.canvas.draw()
    legend, axes = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.x0 >= axes.x1  # beside the plot, not over the bars
    fig.clf()
