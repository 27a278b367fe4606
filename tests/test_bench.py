"""``python -m ring_strategy.bench`` and ``ring_strategy.bench.train`` on real
worker processes: short runs (tiny sizes, few iterations) that cover every
option. Each multi-process run happens once per module and several tests read
its output.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from ring_strategy.bench.collectives import bus_factor
from ring_strategy.bench.options import parse_options
from ring_strategy.bench.sizes import format_size, parse_size, parse_size_list, size_range

REPO_ROOT = Path(__file__).resolve().parents[1]
OPS = ["allreduce", "allgather", "broadcast", "alltoall", "reducescatter"]
FAST = ["--iters", "2", "--warmup", "1", "--rounds", "2"]
# A size row: size count type redop | time algbw busbw #wrong [%mem] [peer time busbw ratio]...
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(sum|none)\s+(.*)$")
BENCH = [sys.executable, "-m", "ring_strategy.bench"]


def rank0_lines(output: str) -> List[str]:
    """What rank 0 printed, without ringrun's ``[0] `` prefix."""
    return [line[4:] for line in output.splitlines() if line.startswith("[0] ")]


def table_rows(output: str) -> Dict[str, List[List[str]]]:
    """Size rows by op: the columns after ``redop``, as strings."""
    rows: Dict[str, List[List[str]]] = {}
    op = ""
    for line in rank0_lines(output):
        if re.match(r"^# (\w+)$", line):
            op = line[2:]
        match = ROW.match(line)
        if match:
            rows.setdefault(op, []).append(list(match.groups()[:4]) + match.group(5).split())
    return rows


def run_alone(args: List[str], timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs a command without ringrun (a world of one) from the repository root."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    for name in [k for k in env if k.startswith("RING_")]:
        del env[name]
    return subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- sizes


def test_sizes_parse_binary_suffixes():
    assert parse_size("4") == 4
    assert parse_size("4K") == 4096
    assert parse_size("64k") == 64 << 10
    assert parse_size("16M") == 16 << 20
    assert parse_size("1G") == 1 << 30
    assert parse_size("64KiB") == 64 << 10
    assert parse_size_list("4,4K,64K,1M,16M,64M,256M") == [4, 4096, 65536, 1 << 20, 16 << 20, 64 << 20, 256 << 20]


@pytest.mark.parametrize("bad", ["4X", "", "-4", "1.5K", "K"])
def test_sizes_reject_what_is_not_a_size(bad):
    with pytest.raises(ValueError, match="Got"):
        parse_size_list(bad) if bad == "" else parse_size(bad)


def test_size_range_and_format():
    assert size_range(4, 64, 2) == [4, 8, 16, 32, 64]
    assert size_range(1024, 20000, 4) == [1024, 4096, 16384]
    assert [format_size(s) for s in (4, 4096, 1 << 20, 3 << 30, 1000)] == ["4", "4K", "1M", "3G", "1000"]
    with pytest.raises(ValueError, match="--step-factor"):
        size_range(4, 64, 1)


# ---------------------------------------------------------------- options


def test_options_defaults_and_ranges():
    opts = parse_options([])
    assert opts.ops == ("allreduce",) and opts.sizes == (4, 4096, 65536, 1 << 20, 16 << 20, 64 << 20)
    assert parse_options(["--min-bytes", "1K", "--max-bytes", "16K", "--step-factor", "4"]).sizes == (1024, 4096, 16384)
    assert parse_options(["--ops", "broadcast,allreduce", "--compare", "gloo"]).ops == ("broadcast", "allreduce")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--ops", "allreduce,foo"], "--ops: should be a comma-separated list of ops among allreduce"),
        (["--sizes", "4,4X"], "--sizes: should be a number of bytes"),
        (["--sizes", "4K", "--min-bytes", "1"], "either --sizes or --min-bytes"),
        (["--min-bytes", "1M", "--max-bytes", "1K"], "--max-bytes should be at least"),
        (["--step-factor", "1"], "--step-factor should be at least 2"),
        (["--iters", "0"], "--iters: should be an integer of at least 1. Got: '0'"),
        (["--dtype", "float8"], "--dtype: invalid choice: 'float8'"),
        (["--compare", "rccl"], "--compare: should be a comma-separated list of peers among gloo, mpi, nccl, torch-nccl"),
        (["--compare", "nccl"], "--compare nccl does not run with --device cpu"),
        (["--device", "cuda"], "sees no CUDA GPU here"),
        (["--device", "cuda", "--membw"], "--membw measures host memory: not with --device cuda"),
        (["--case", "small-tensors", "--sizes", "4K"], "--case small-tensors has its own sizes"),
        (["--json", "/no/such/folder/rows.json"], "--json: the folder of"),
    ],
)
def test_bad_options_exit_2_with_a_clear_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_options(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_option_ends_every_rank_with_status_2(ringrun):
    result = ringrun(2, [*BENCH, "--ops", "allreduce,sendrecv"], timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "should be a comma-separated list of ops" in result.stderr


# ---------------------------------------------------------------- the size table, two ranks


@pytest.fixture(scope="module")
def sweep(run_output, tmp_path_factory):
    """One run with every option of the size table; returns (output, folder)."""
    folder = tmp_path_factory.mktemp("bench")
    args = [
        *BENCH, "--ops", ",".join(OPS), "--sizes", "4,64K", *FAST, "--check", "--compare", "gloo",
        "--membw", "--json", str(folder / "rows.json"), "--plot", str(folder / "busbw.png"),
    ]
    return run_output(2, args, timeout=120), folder


def test_sweep_exits_cleanly(sweep):
    output, _ = sweep
    assert output.startswith("[ringrun exit code 0]"), output[-4000:]


def test_table_has_the_nccl_tests_columns(sweep):
    output, _ = sweep
    lines = rank0_lines(output)
    names = next(line for line in lines if "#wrong" in line).split()
    assert names[1:9] == ["size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong"]
    assert any("median per-iteration time" in line for line in lines)
    rows = table_rows(output)
    assert list(rows) == OPS
    for op, op_rows in rows.items():
        assert len(op_rows) == 2, (op, op_rows)
        assert all(row[2] == "float32" for row in op_rows)
        assert {row[3] for row in op_rows} == {"sum" if op in ("allreduce", "reducescatter") else "none"}


def test_only_rank_0_prints(sweep):
    output, _ = sweep
    assert not re.search(r"^\[1\] ", output, re.M), output[-3000:]


def test_check_finds_no_wrong_values(sweep):
    output, _ = sweep
    for op_rows in table_rows(output).values():
        for row in op_rows:
            assert row[7] == "0", row  # ring's #wrong
    assert "# wrong values: ring 0, gloo 0" in rank0_lines(output)


def test_compare_gloo_adds_peer_time_busbw_and_ratio(sweep):
    output, _ = sweep
    names = next(line for line in rank0_lines(output) if "#wrong" in line).split()
    assert names[-3:] == ["time", "busbw", "ratio"]
    assert any(line.split() == ["#", "ring", "gloo"] for line in rank0_lines(output))
    for op_rows in table_rows(output).values():
        for row in op_rows:
            time_us, peer_time_us, ratio = float(row[4]), float(row[9]), row[11]
            assert ratio.endswith("x")
            assert float(ratio[:-1]) == pytest.approx(peer_time_us / time_us, rel=0.05)


def test_membw_prints_busbw_as_a_percentage_of_the_memory_limit(sweep):
    output, _ = sweep
    lines = rank0_lines(output)
    memory = next(line for line in lines if line.startswith("# memory:"))
    total = float(re.search(r"([\d.]+) GB/s total copy bandwidth", memory).group(1))
    assert total > 0
    limit = next(line for line in lines if line.startswith("# memory limit"))
    assert f"/ 3 = {total / 3:.2f} GB/s busbw" in limit
    rows = table_rows(output)
    assert all(row[8].endswith("%") for row in rows["allreduce"])
    assert all(row[8] == "-" for row in rows["broadcast"])


def test_json_has_one_object_per_row(sweep):
    output, folder = sweep
    objects = json.loads((folder / "rows.json").read_text())
    assert len(objects) == len(OPS) * 2
    for obj in objects:
        for key in ("op", "size_bytes", "dtype", "time_us", "algbw_gbps", "busbw_gbps", "wrong",
                    "peer", "peer_time_us", "peer_busbw_gbps", "ratio"):
            assert key in obj, (key, obj)
        assert obj["peer"] == "gloo" and obj["wrong"] == 0 and obj["peer_wrong"] == 0
        assert obj["algbw_gbps"] == pytest.approx(obj["size_bytes"] / obj["time_us"] / 1e3)
        assert obj["busbw_gbps"] == pytest.approx(obj["algbw_gbps"] * bus_factor(obj["op"], 2))
        assert obj["ratio"] == pytest.approx(obj["peer_time_us"] / obj["time_us"])
    sizes = {obj["op"]: [] for obj in objects}
    for obj in objects:
        sizes[obj["op"]].append(obj["size_bytes"])
    # 4 bytes is one float32: ops that split their buffer over 2 ranks round up to 2 elements.
    assert sizes["allreduce"] == [4, 65536] and sizes["allgather"] == [8, 65536]


def test_plot_writes_a_png(sweep):
    output, folder = sweep
    image = folder / "busbw.png"
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"# wrote {image}" in rank0_lines(output)


# ---------------------------------------------------------------- one rank, no launcher


def test_world_of_one_with_a_size_range_and_no_mpi4py():
    result = run_alone([*BENCH, "--ops", "allreduce,reducescatter", "--min-bytes", "1K", "--max-bytes", "16K",
                        "--step-factor", "4", "--dtype", "bfloat16", "--check", "--compare", "mpi", *FAST])
    assert result.returncode == 0, result.stdout + result.stderr
    prefixed = "\n".join(f"[0] {line}" for line in result.stdout.splitlines())
    rows = table_rows(prefixed)
    assert [int(row[0]) for row in rows["allreduce"]] == [1024, 4096, 16384]
    assert all(row[2] == "bfloat16" and row[7] == "0" for row in rows["allreduce"] + rows["reducescatter"])
    if importlib.util.find_spec("mpi4py") is None:
        assert "# --compare mpi: mpi4py is not installed (pip install mpi4py); skipping the mpi peer" in result.stdout
    else:
        assert "mpi" in result.stdout


# ---------------------------------------------------------------- --case small-tensors


@pytest.fixture(scope="module")
def small_tensors(run_output, tmp_path_factory):
    folder = tmp_path_factory.mktemp("case")
    args = [*BENCH, "--case", "small-tensors", "--num-tensors", "20", "--tensor-bytes", "1K", *FAST, "--check",
            "--compare", "gloo", "--json", str(folder / "case.json")]
    return run_output(2, args, timeout=120), folder


def test_small_tensors_times_ring_grouped_ring_gloo_and_coalesced_gloo(small_tensors):
    output, folder = small_tensors
    assert output.startswith("[ringrun exit code 0]"), output[-4000:]
    lines = rank0_lines(output)
    assert any("20 tensors of 1K (float32) per step" in line for line in lines)
    variants = {}
    for line in lines:
        fields = line.split()
        if fields and fields[0] in ("ring", "ring-grouped", "gloo", "gloo-coalesced"):
            variants[fields[0]] = fields
    assert list(variants) == ["ring", "ring-grouped", "gloo", "gloo-coalesced"], lines
    for fields in variants.values():
        assert float(fields[1]) > 0 and fields[4] == "0" and fields[5].endswith("x")
    assert variants["ring"][5] == "1.00x"
    objects = json.loads((folder / "case.json").read_text())
    assert [obj["peer"] for obj in objects] == ["ring-grouped", "gloo", "gloo-coalesced"]
    assert all(obj["op"] == "small-tensors" and obj["size_bytes"] == 20 * 1024 for obj in objects)


# ---------------------------------------------------------------- bench.train


def test_train_compare_ddp_prints_samples_per_second_and_efficiency(run_output, tmp_path):
    args = [sys.executable, "-m", "ring_strategy.bench.train", "--compare", "ddp", "--hidden", "32", "--layers", "1",
            "--batch-size", "16", "--steps", "3", "--warmup", "1", "--rounds", "1", "--json", str(tmp_path / "t.json")]
    output = run_output(2, args, timeout=120)
    assert output.startswith("[ringrun exit code 0]"), output[-4000:]
    lines = rank0_lines(output)
    assert any("MLP 784-32-10" in line and "1 thread(s) per rank, 2 rank(s)" in line for line in lines)
    local = next(line for line in lines if line.strip().startswith("np=1, no communication"))
    assert float(local.split()[-2]) > 0
    for name in ("ring", "ring (", "ddp", "no communication"):  # "ring (OTHER)": the other gradient schedule
        line = next(line for line in lines if line.strip().startswith(f"np=2, {name}"))
        rate, efficiency = line.split()[-2:]
        assert float(rate) > 0 and efficiency.endswith("%") and float(efficiency[:-1]) > 0
    assert any(line.startswith("# ring/ddp samples/s:") for line in lines)
    results = json.loads((tmp_path / "t.json").read_text())
    assert [r["framework"] for r in results] in (["ring", "ring (overlap)", "ddp", "none"],
                                                  ["ring", "ring (after_backward)", "ddp", "none"])
    assert any(re.match(r"# ring: gradient schedule (overlap|after_backward) \(auto: ", line) for line in lines)
    assert not re.search(r"^\[1\] ", output, re.M)


@pytest.mark.slow  # 3 s; the sharded optimizer's own tests check its state split in make test
def test_train_optimizer_state_case_prints_state_memory_and_step_time(run_output, tmp_path):
    """--case optimizer-state: Adam's state per rank halves with sharding at np=2; peak RSS and step time shown."""
    args = [sys.executable, "-m", "ring_strategy.bench.train", "--case", "optimizer-state", "--hidden", "64",
            "--layers", "1", "--steps", "1", "--warmup", "1", "--rounds", "1", "--json", str(tmp_path / "s.json")]
    output = run_output(2, args, timeout=120)
    assert output.startswith("[ringrun exit code 0]"), output[-4000:]
    lines = rank0_lines(output)
    assert any("--case optimizer-state: MLP 784-64-10" in line for line in lines), lines
    results = {r["framework"]: r for r in json.loads((tmp_path / "s.json").read_text())}
    assert list(results) == ["ring", "ring sharded", "torch ZeRO (gloo)"]
    whole, sharded = results["ring"]["state_bytes"], results["ring sharded"]["state_bytes"]
    assert len(whole) == 2 and whole[0] == whole[1] and abs(sharded[0] - whole[0] / 2) <= 64, (whole, sharded)
    assert sum(results["torch ZeRO (gloo)"]["state_bytes"]) > 0
    for r in results.values():
        assert r["step_s"] > 0 and all(b > 0 for b in r["peak_rss_bytes"]), r
    for name in results:
        assert any(line.strip().startswith(name) for line in lines), (name, lines)


@pytest.mark.slow  # 3 s; tests/torch/test_powersgd.py checks PowerSGD itself in make test
def test_train_compression_case_prints_bytes_per_step_and_loss_curves(run_output, tmp_path):
    """--case compression at np=2: fp16 sends half the bytes, PowerSGD far fewer, and every loss falls."""
    args = [sys.executable, "-m", "ring_strategy.bench.train", "--case", "compression", "--hidden", "64",
            "--layers", "1", "--loss-steps", "12", "--powersgd-rank", "2", "--powersgd-warmup", "2",
            "--json", str(tmp_path / "c.json")]
    output = run_output(2, args, timeout=120)
    assert output.startswith("[ringrun exit code 0]"), output[-4000:]
    results = {r["framework"]: r for r in json.loads((tmp_path / "c.json").read_text())}
    assert list(results) == ["none", "fp16", "powersgd rank 2"]
    dense = results["none"]["dense_bytes_per_step"]
    assert results["none"]["sent_bytes_per_step"] == dense
    assert results["fp16"]["sent_bytes_per_step"] == dense // 2
    assert 0 < results["powersgd rank 2"]["sent_bytes_per_step"] < dense // 10
    for r in results.values():
        assert len(r["losses"]) == 12 and r["losses"][-1] < r["losses"][0], r["losses"]
    lines = rank0_lines(output)
    assert any(line.startswith("# loss of the global batch at step:") for line in lines), lines


def test_train_bad_option_exits_2(capsys):
    from ring_strategy.bench.train import main

    with pytest.raises(SystemExit) as exc:
        main(["--compare", "nccl"])
    assert exc.value.code == 2
    assert "--compare: invalid choice: 'nccl'" in capsys.readouterr().err


# ---------------------------------------------------------------- bench.timeline_overhead


def test_timeline_overhead_prints_both_step_times_and_the_overhead(run_output):
    args = [sys.executable, "-m", "ring_strategy.bench.timeline_overhead", "--num-tensors", "8",
            "--tensor-bytes", "1024", "--steps", "2", "--rounds", "3"]
    output = run_output(2, args, timeout=120)
    assert output.startswith("[ringrun exit code 0]"), output[-4000:]
    lines = rank0_lines(output)
    assert lines[0] == "# 2 rank(s), 8 x 1024 B allreduces per step, 3 pairs of rounds of 2 steps", lines
    off = re.match(r"timeline off: ([\d.]+) ms/step", lines[1])
    on = re.match(r"timeline on:  ([\d.]+) ms/step \((\d+) KiB written per step\)", lines[2])
    assert off and on and float(off.group(1)) > 0 and float(on.group(1)) > 0, lines
    assert re.match(r"overhead: [+-][\d.]+% \(median over the pairs of on / off; 95% confidence interval "
                    r"[+-][\d.]+% to [+-][\d.]+%; quartiles [+-][\d.]+% and [+-][\d.]+%\)$", lines[3]), lines
    assert not re.search(r"^\[1\] ", output, re.M)


def _compare_mpi_small_tensors(runs: int) -> None:
    """``--compare mpi --case small-tensors`` under mpirun, ``runs`` times:
    each turn of MPI ends in MPI's barrier before ring's, so a rank whose
    Iallreduce still needs its peer to drive MPI's progress never waits
    for it in ring's barrier (before, about one run in eight hung)."""
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not installed (the bench extra: pip install 'ring-strategy[bench]')")
    from tests.jobs import mpirun_command, run_job

    cmd = mpirun_command(2, sys.executable, "-m", "ring_strategy.bench", "--compare", "mpi", "--case",
                         "small-tensors", "--num-tensors", "100", "--iters", "10", "--check")
    for run in range(runs):
        proc = run_job(cmd, timeout=60)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"run {run + 1}:\n{out[-4000:]}"
        assert re.search(r"^\s+mpi\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+0\s", proc.stdout, re.M), out[-4000:]


def test_compare_mpi_small_tensors_ends_each_turn_in_its_library():
    _compare_mpi_small_tensors(3)


@pytest.mark.slow
def test_compare_mpi_small_tensors_twenty_times():
    _compare_mpi_small_tensors(20)
# ---------------------------------------------------------------- optional peers, plot, progress


def test_bench_runs_with_torch_mpi4py_and_matplotlib_missing():
    """The peers' libraries are optional: blocked here (None in sys.modules, as
    if not installed), a comparison skips with the reason and --plot is refused
    before the job starts."""
    blocked = "import sys; sys.modules.update(dict.fromkeys(['torch', 'torch.distributed', 'mpi4py', 'matplotlib']))"
    run = f"{blocked}; import runpy; runpy.run_module('ring_strategy.bench', run_name='__main__')"
    result = run_alone([sys.executable, "-c", run, "--sizes", "4,1K", "--compare", "gloo,mpi", *FAST])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "# --compare gloo: torch is not installed" in result.stdout
    assert "# --compare mpi: mpi4py is not installed" in result.stdout
    assert [int(row[0]) for row in table_rows("\n".join(f"[0] {l}" for l in result.stdout.splitlines()))["allreduce"]] \
        == [4, 1024]
    assert re.search(r"^# \[1/2\] allreduce 4 \(.* s so far\)$", result.stderr, re.M), result.stderr
    assert re.search(r"^# \[2/2\] allreduce 1K ", result.stderr, re.M), result.stderr
    refused = run_alone([sys.executable, "-c", run, "--plot", "x.png"])
    assert refused.returncode == 2 and "--plot needs matplotlib" in refused.stderr, refused.stderr


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")
def test_plot_draws_busbw_on_a_log_scale():
    from ring_strategy.bench.plot import sizes_figure
    from ring_strategy.bench.results import Measurement, Row

    rows = [Row("allreduce", size, size // 4, "float32", "sum", 1.0,
                (Measurement("ring", size / 1e9 + 1e-5, 0), Measurement("gloo", size / 5e8 + 2e-5, 0)))
            for size in (4, 4096, 1 << 20)]
    fig = sizes_figure(rows, "test", mem_limit_gbps=3.0)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_ylabel() == "busbw (GB/s, log scale)"
    assert [line.get_label() for line in ax.get_lines()] == ["allreduce, ring", "allreduce, gloo",
                                                              "allreduce memory limit"]
    fig.clf()
