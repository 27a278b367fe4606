"""ringrun's horovodrun tuning options and --config-file
(ring_strategy/runner/tuning_args.py): each sets its engine variable, values
are checked by the engine's own rule with errors naming the option or the
file's key, --help groups them as horovodrun does, and a real job's engine
runs with what the options said.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from ring_strategy import _native
from ring_strategy.runner import launch
from ring_strategy.runner.tuning_args import IGNORED_KEYS, OPTIONS, tuning_environment


def environment(argv: List[str]) -> Dict[str, str]:
    parser = launch.build_parser()
    return tuning_environment(parser, parser.parse_args(["-np", "1", *argv, "true"]))


def error(argv: List[str], capsys) -> str:
    with pytest.raises(SystemExit) as info:
        environment(argv)
    assert info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, expected", [
    (["--fusion-threshold-mb", "32"], {"RING_FUSION_THRESHOLD": str(32 << 20)}),
    (["--fusion-threshold-mb", "0"], {"RING_FUSION_THRESHOLD": "0"}),
    (["--cycle-time-ms", "2.5"], {"RING_CYCLE_TIME": "2.5"}),
    (["--cache-capacity", "2048"], {"RING_CACHE_CAPACITY": "2048"}),
    (["--hierarchical-allreduce"], {"RING_HIERARCHICAL_ALLREDUCE": "1"}),
    (["--no-hierarchical-allreduce"], {"RING_HIERARCHICAL_ALLREDUCE": "0"}),
    (["--autotune", "--autotune-log-file", "/tmp/t.csv", "--autotune-warmup-samples", "3"],
     {"RING_AUTOTUNE": "1", "RING_AUTOTUNE_LOG": "/tmp/t.csv", "RING_AUTOTUNE_WARMUP_SAMPLES": "3"}),
    (["--timeline-filename", "/tmp/t.json", "--timeline-mark-cycles"],
     {"RING_TIMELINE": "/tmp/t.json", "RING_TIMELINE_MARK_CYCLES": "1"}),
    (["--timeline-filename", "DYNAMIC"], {"RING_TIMELINE": "DYNAMIC"}),
    (["--no-stall-check"], {"RING_STALL_CHECK_DISABLE": "1"}),
    (["--stall-check-warning-time-seconds", "120", "--stall-check-shutdown-time-seconds", "240"],
     {"RING_STALL_CHECK_TIME_SECONDS": "120", "RING_STALL_SHUTDOWN_TIME_SECONDS": "240"}),
    (["--gloo-timeout-seconds", "45"], {"RING_TIMEOUT_SECONDS": "45"}),
    (["--log-level", "INFO"], {"RING_LOG_LEVEL": "INFO"}),
    (["--gloo"], {}),
    ([], {}),
])
def test_each_option_sets_its_variable(argv: List[str], expected: Dict[str, str]) -> None:
    assert environment(argv) == expected


def test_a_relative_path_is_made_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    env = environment(["--timeline-filename", "t.json", "--autotune-log-file", "a.csv"])
    assert env == {"RING_TIMELINE": str(tmp_path / "t.json"), "RING_AUTOTUNE_LOG": str(tmp_path / "a.csv")}


SAMPLES = ["0", "3", "-1", "2.5", "1e3", " 7 ", "inf", "abc", "INFO", "fatal", "1_0"]


@pytest.mark.parametrize("option", [o for o in OPTIONS if o.switch is None], ids=lambda o: o.flag)
def test_options_check_values_as_the_engine_reads_their_variable(option) -> None:
    """What ringrun accepts for an option, the engine accepts in its variable,
    and what ringrun refuses, the engine refuses too."""
    for text in SAMPLES:
        if option.kind.accepts(text):
            _native.parse_config({option.variable: option.env(option.kind.parse(text), text)})
        else:
            with pytest.raises(_native.BadArgumentError, match=option.variable):
                _native.parse_config({option.variable: text})


@pytest.mark.parametrize("argv, message", [
    (["--cache-capacity", "1e3"], "--cache-capacity should be a non-negative integer. Got: '1e3'"),
    (["--fusion-threshold-mb", "1.5"], "--fusion-threshold-mb should be a non-negative integer number of megabytes"),
    (["--cycle-time-ms", "-1"], "--cycle-time-ms should be a non-negative number of milliseconds. Got: '-1'"),
    (["--log-level", "loud"], "--log-level should be one of trace, debug, info, warning, error. Got: 'loud'"),
    (["--stall-check-shutdown-time-seconds", "nan"], "--stall-check-shutdown-time-seconds should be"),
    (["--gloo-timeout-seconds", "0"], "--gloo-timeout-seconds should be a positive number"),
    (["--hierarchical-allreduce", "--no-hierarchical-allreduce"], "not allowed with argument"),
    (["--gloo", "--mpi"], "not allowed with argument"),
])
def test_bad_values_name_the_option(argv: List[str], message: str, capsys) -> None:
    assert message in error(argv, capsys)


@pytest.mark.parametrize("argv, message", [
    (["-np", "1e3"], "-np should be an integer. Got: 1e3"),
    (["-np", "2", "--start-timeout", "1_0"], "--start-timeout should be a finite number. Got: 1_0"),
    (["-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "1", "inf"],
     "--blacklist-cooldown-range should be a finite number. Got: inf"),
])
def test_ringruns_other_numbers_follow_the_same_rule(argv: List[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit):
        launch.build_parser().parse_args([*argv, "true"])
    assert message in capsys.readouterr().err


CONFIG = """\
controller: gloo
params:
  fusion_threshold_mb: 32
  cycle_time_ms: 10
  cache_capacity: 2048
  hierarchical_allreduce: true
  hierarchical_allgather: true
autotune:
  enabled: true
  log_file: {path}/tune.csv
  warmup_samples: 5
  steps_per_sample: 20
timeline:
  filename: {path}/trace.json
  mark_cycles: true
stall_check:
  enabled: false
  warning_time_seconds: 120
  shutdown_time_seconds: 240
library_options:
  gloo_timeout_seconds: 60
  num_nccl_streams: 2
logging:
  level: INFO
"""


def test_config_file_in_horovodruns_layout(tmp_path: Path, capsys) -> None:
    path = tmp_path / "horovod.yaml"
    path.write_text(CONFIG.format(path=tmp_path))
    assert environment(["--config-file", str(path)]) == {
        "RING_FUSION_THRESHOLD": str(32 << 20), "RING_CYCLE_TIME": "10", "RING_CACHE_CAPACITY": "2048",
        "RING_HIERARCHICAL_ALLREDUCE": "1", "RING_AUTOTUNE": "1", "RING_AUTOTUNE_LOG": str(tmp_path / "tune.csv"),
        "RING_AUTOTUNE_WARMUP_SAMPLES": "5", "RING_TIMELINE": str(tmp_path / "trace.json"),
        "RING_TIMELINE_MARK_CYCLES": "1", "RING_STALL_CHECK_DISABLE": "1", "RING_STALL_CHECK_TIME_SECONDS": "120",
        "RING_STALL_SHUTDOWN_TIME_SECONDS": "240", "RING_TIMEOUT_SECONDS": "60", "RING_LOG_LEVEL": "INFO",
    }
    err = capsys.readouterr().err
    for key in ("params.hierarchical_allgather", "autotune.steps_per_sample", "library_options.num_nccl_streams"):
        assert f"{key} has no counterpart in ring; ignored" in err, err


def test_the_command_line_wins_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("params:\n  cache_capacity: 5\n  hierarchical_allreduce: true\n"
                    "stall_check:\n  enabled: true\n")
    env = environment(["--cache-capacity", "7", "--config-file", str(path), "--no-hierarchical-allreduce"])
    assert env == {"RING_CACHE_CAPACITY": "7", "RING_HIERARCHICAL_ALLREDUCE": "0", "RING_STALL_CHECK_DISABLE": "0"}


@pytest.mark.parametrize("content, message", [
    ("params:\n  cache_capacity: 1.0\n", "params.cache_capacity should be a non-negative integer. Got: '1.0'"),
    ("params:\n  cache_capacity: '1e3'\n", "params.cache_capacity should be a non-negative integer. Got: '1e3'"),
    ("params:\n  fusion_threshold_mb: true\n", "params.fusion_threshold_mb should be a non-negative integer"),
    ("autotune:\n  enabled: maybe\n", "autotune.enabled should be 0 or 1. Got: 'maybe'"),
    ("params:\n  fusion_treshold_mb: 3\n", "unknown key 'params.fusion_treshold_mb'; params has cache_capacity"),
    ("tuning:\n  x: 1\n", "unknown section 'tuning'"),
    ("controller: jsrun\n", "controller should be gloo or mpi. Got: 'jsrun'"),
    ("params: [1, 2]\n", "params should be a mapping of settings"),
    ("- 1\n", "should be a mapping of sections"),
    ("params: {cycle_time_ms: [1]}\n", "params.cycle_time_ms should be a single value"),
    ("params: {\n", "not valid YAML"),
])
def test_config_file_errors_name_the_file_and_key(tmp_path: Path, content: str, message: str, capsys) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(content)
    err = error(["--config-file", str(path)], capsys)
    assert f"--config-file {path}: {message}" in err, err


def test_a_missing_config_file_is_named(tmp_path: Path, capsys) -> None:
    assert "--config-file: cannot read" in error(["--config-file", str(tmp_path / "none.yaml")], capsys)


# horovodrun's --help groups, as its users know them.
HOROVODRUN_GROUPS = {
    "tuneable parameter arguments": ["--fusion-threshold-mb", "--cycle-time-ms", "--cache-capacity",
                                     "--hierarchical-allreduce", "--no-hierarchical-allreduce"],
    "autotune arguments": ["--autotune", "--autotune-log-file", "--autotune-warmup-samples"],
    "timeline arguments": ["--timeline-filename", "--timeline-mark-cycles"],
    "stall check arguments": ["--no-stall-check", "--stall-check-warning-time-seconds",
                              "--stall-check-shutdown-time-seconds"],
    "library arguments": ["--gloo-timeout-seconds"],
    "logging arguments": ["--log-level"],
    "controller arguments": ["--gloo", "--mpi"],
}


def test_help_groups_the_options_as_horovodrun_does() -> None:
    parser = launch.build_parser()
    groups = {g.title: [s for a in g._group_actions for s in a.option_strings] for g in parser._action_groups}
    for title, flags in HOROVODRUN_GROUPS.items():
        assert groups.get(title) == flags, (title, groups.get(title))
    text = " ".join(parser.format_help().split())
    for option in OPTIONS:
        assert f"sets {option.variable}" in text, option.flag
    assert "--config-file FILE" in text


def test_mpi_is_accepted_and_explained(capsys) -> None:
    assert environment(["--mpi"]) == {}
    assert "ringrun does not use mpirun" in capsys.readouterr().err


def test_the_start_timeout_error_names_the_variable_set(monkeypatch, capsys) -> None:
    monkeypatch.delenv("RING_START_TIMEOUT", raising=False)
    monkeypatch.setenv("HOROVOD_START_TIMEOUT", "soon")
    with pytest.raises(SystemExit):
        launch.main(["-np", "1", "true"])
    assert "HOROVOD_START_TIMEOUT should be a positive number of seconds. Got: 'soon'" in capsys.readouterr().err


PRINT_CONFIG = ("import json, ring_strategy as rs\nrs.init()\n"
                "print('config', json.dumps(rs.basics._runtime().config))\nrs.shutdown()\n")


def test_options_reach_every_workers_engine(ringrun, tmp_path: Path) -> None:
    """One job: options on the command line and in --config-file end up in
    the configuration each worker's engine runs with."""
    path = tmp_path / "c.yaml"
    path.write_text("params:\n  cycle_time_ms: 2.5\n  cache_capacity: 9\n"
                    f"autotune:\n  log_file: {tmp_path}/tune.csv\n  warmup_samples: 4\n"
                    "stall_check:\n  enabled: false\nlogging:\n  level: error\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RING_", "HOROVOD_"))}
    job = ringrun(2, ["--fusion-threshold-mb", "3", "--cache-capacity", "7", "--no-hierarchical-allreduce",
                      "--gloo-timeout-seconds", "12", "--timeline-mark-cycles", "--config-file", path, "--gloo",
                      sys.executable, "-c", PRINT_CONFIG], base=base, timeout=60)
    assert job.returncode == 0, job.output
    configs = [json.loads(line.split("config ", 1)[1]) for line in job.stdout.splitlines() if "config {" in line]
    assert len(configs) == 2, job.output
    for config in configs:
        assert config["fusion_threshold_bytes"] == 3 << 20 and config["cache_capacity"] == 7, config
        assert config["cycle_time_ms"] == 2.5 and config["autotune_warmup_samples"] == 4, config
        assert config["autotune_log"] == f"{tmp_path}/tune.csv" and not config["autotune"], config
        assert config["hierarchical_allreduce"] == 0 and config["timeout_seconds"] == 12, config
        assert config["timeline_mark_cycles"] and config["log_level"] == 4, config
        assert config["stall_check_seconds"] == 0 and config["stall_shutdown_seconds"] == 0, config


def test_a_bad_option_stops_ringrun_before_any_worker(ringrun) -> None:
    job = ringrun(2, ["--cache-capacity", "1e3", sys.executable, "-c", "print('started')"], timeout=60)
    assert job.returncode == 2 and "started" not in job.stdout, job.output
    assert "--cache-capacity should be a non-negative integer. Got: '1e3'" in job.stderr


def test_the_docs_page_lists_every_option_with_its_variable_and_key() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "ringrun-tuning.md").read_text()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in page.splitlines() if "| `--" in line]
    for option in OPTIONS:
        row = next((r for r in rows if r[1].startswith((f"`{option.flag}`", f"`{option.flag} "))), None)
        assert row is not None and f"`{option.variable}" in row[2], (option.flag, row)
        if option.key:
            assert row[3].startswith(f"`{option.key}`"), (option.flag, row)
    for key in IGNORED_KEYS:
        assert f"`{key}`" in page, key
