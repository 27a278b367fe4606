"""``ringrun``'s engine settings: horovodrun's tuning options and ``--config-file``.

Each option sets one variable of the engine's configuration table in
ringrun's environment, which every worker inherits (remote ones too). Its
value is checked by the rule the engine reads the variable with
(:mod:`ring_strategy._config_values`), and an error names the option, or the
``--config-file`` key, that gave it. ``ringrun --help`` groups the options
as ``horovodrun`` does.

``--config-file`` takes ``horovodrun``'s YAML layout::

    controller: gloo                 # or mpi: accepted, changes nothing
    params:
      fusion_threshold_mb: 32
      cycle_time_ms: 2.5
      cache_capacity: 2048
      hierarchical_allreduce: false
    autotune:
      enabled: true
      log_file: tune.csv
      warmup_samples: 2
    timeline:
      filename: trace.json
      mark_cycles: true
    stall_check:
      enabled: true
      warning_time_seconds: 120
      shutdown_time_seconds: 240
    library_options:
      gloo_timeout_seconds: 60
    logging:
      level: info

Options given on the command line win over the file. Keys of that layout
the engine has no counterpart for (:data:`IGNORED_KEYS`) are ignored with a
warning; any other key is an error.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from ring_strategy import _config_values as values
from ring_strategy import _contracts as names

__all__ = ["IGNORED_KEYS", "OPTIONS", "Option", "add_tuning_options", "tuning_environment"]

#: The level names of ``RING_LOG_LEVEL`` (warn and fatal mean warning and error).
LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "warn", "fatal")


def _text(value: Any, text: str) -> str:
    return text.strip()


def _switch(value: bool, text: str) -> str:
    return "1" if value else "0"


def _megabytes(value: int, text: str) -> str:
    return str(value * 2**20)


def _path(value: str, text: str) -> str:
    # The workers inherit ringrun's environment; an absolute path keeps the
    # file where the user asked whatever directory rank 0 runs in.
    return value if value == names.TIMELINE_DYNAMIC else os.path.abspath(value)


def _any_path(text: str) -> Optional[str]:
    return text or None


@dataclasses.dataclass(frozen=True)
class Option:
    """One ringrun option that sets one engine variable.

    Attributes:
        flag: The option's name on the command line.
        variable: The engine variable it sets (its ``RING_`` name).
        group: Its ``--help`` group (horovodrun's).
        help: What it does.
        kind: The rule its value is checked by (a switch's: boolean).
        env: The variable's value from the checked value and the text given.
        switch: For an option without a value: the value it stands for.
        key: Its ``--config-file`` key (``section.name``), if any.
        inverted: The key means the opposite of the switch (``stall_check.enabled``).
        metavar: The value's name in ``--help``.
    """

    flag: str
    variable: str
    group: str
    help: str
    kind: values.Kind
    env: Callable[[Any, str], str] = _text
    switch: Optional[str] = None
    key: Optional[str] = None
    inverted: bool = False
    metavar: Optional[str] = None

    @property
    def dest(self) -> str:
        """The argparse destination: one per variable, so that a switch and
        its negation share it."""
        return "tuning_" + self.variable.lower()


_PARAMS = "tuneable parameter arguments"
_AUTOTUNE = "autotune arguments"
_TIMELINE = "timeline arguments"
_STALL = "stall check arguments"
_LIBRARY = "library arguments"
_LOGGING = "logging arguments"
_CONTROLLER = "controller arguments"
_GROUP_ORDER = (_PARAMS, _AUTOTUNE, _TIMELINE, _STALL, _LIBRARY, _LOGGING, _CONTROLLER)

_BOOLEAN = values.boolean()
_SECONDS = values.number("a non-negative number of seconds", 0)

#: Every option, by group, in ``--help`` order.
OPTIONS: Tuple[Option, ...] = (
    Option("--fusion-threshold-mb", "RING_FUSION_THRESHOLD", _PARAMS,
           "fuse allreduces into one buffer up to MB megabytes (MB * 1048576 bytes); 0 turns fusion off",
           values.integer("a non-negative integer number of megabytes", 0, (2**63 - 1) >> 20), _megabytes,
           key="params.fusion_threshold_mb", metavar="MB"),
    Option("--cycle-time-ms", "RING_CYCLE_TIME", _PARAMS,
           "longest time in milliseconds rank 0 gathers a batch of tensors while they are still arriving",
           values.number("a non-negative number of milliseconds", 0), key="params.cycle_time_ms", metavar="MS"),
    Option("--cache-capacity", "RING_CACHE_CAPACITY", _PARAMS,
           "tensor names kept in the response cache; 0 turns it off",
           values.integer("a non-negative integer", 0), key="params.cache_capacity", metavar="N"),
    Option("--hierarchical-allreduce", "RING_HIERARCHICAL_ALLREDUCE", _PARAMS,
           "reduce within each host, then across hosts, then share within each host",
           _BOOLEAN, _switch, switch="1", key="params.hierarchical_allreduce"),
    Option("--no-hierarchical-allreduce", "RING_HIERARCHICAL_ALLREDUCE", _PARAMS,
           "one flat ring over every rank, also on several hosts", _BOOLEAN, _switch, switch="0"),
    Option("--autotune", "RING_AUTOTUNE", _AUTOTUNE,
           "rank 0 tunes the fusion threshold and cycle time from measured throughput, then settles",
           _BOOLEAN, _switch, switch="1", key="autotune.enabled"),
    Option("--autotune-log-file", "RING_AUTOTUNE_LOG", _AUTOTUNE,
           "rank 0 writes every autotune trial to PATH (CSV)",
           values.Kind("a path", _any_path), _path, key="autotune.log_file", metavar="PATH"),
    Option("--autotune-warmup-samples", "RING_AUTOTUNE_WARMUP_SAMPLES", _AUTOTUNE,
           "samples discarded after each change of the tuned settings",
           values.integer("an integer from 0 to 2147483647", 0, 2**31 - 1), key="autotune.warmup_samples",
           metavar="N"),
    Option("--timeline-filename", "RING_TIMELINE", _TIMELINE,
           f"rank 0 writes a Chrome trace of every tensor's phases to PATH ({names.TIMELINE_DYNAMIC}: no file "
           "until the script calls start_timeline())",
           values.Kind("a path", _any_path), _path, key="timeline.filename", metavar="PATH"),
    Option("--timeline-mark-cycles", "RING_TIMELINE_MARK_CYCLES", _TIMELINE,
           "mark every cycle of the engine in the timeline", _BOOLEAN, _switch, switch="1",
           key="timeline.mark_cycles"),
    Option("--no-stall-check", "RING_STALL_CHECK_DISABLE", _STALL,
           "no stall check: neither the warning nor the shutdown", _BOOLEAN, _switch, switch="1",
           key="stall_check.enabled", inverted=True),
    Option("--stall-check-warning-time-seconds", "RING_STALL_CHECK_TIME_SECONDS", _STALL,
           "rank 0 warns about tensors some ranks submitted and others have not after S seconds (0: never)",
           _SECONDS, key="stall_check.warning_time_seconds", metavar="S"),
    Option("--stall-check-shutdown-time-seconds", "RING_STALL_SHUTDOWN_TIME_SECONDS", _STALL,
           "such a stall fails the job on every rank after S seconds (0: never)",
           _SECONDS, key="stall_check.shutdown_time_seconds", metavar="S"),
    Option("--gloo-timeout-seconds", "RING_TIMEOUT_SECONDS", _LIBRARY,
           "seconds without progress in a transfer before it fails",
           values.number("a positive number of seconds of at least 0.001", 0.001),
           key="library_options.gloo_timeout_seconds", metavar="S"),
    Option("--log-level", "RING_LOG_LEVEL", _LOGGING,
           "the engine's log level, in any case (warn and fatal mean warning and error)",
           values.word("one of trace, debug, info, warning, error", LOG_LEVELS), key="logging.level",
           metavar="{trace,debug,info,warning,error}"),
)

#: Keys of horovodrun's layout that no engine setting matches: ignored, with a warning.
IGNORED_KEYS = frozenset({
    "params.hierarchical_allgather", "autotune.steps_per_sample", "autotune.bayes_opt_max_samples",
    "autotune.gaussian_process_noise", "library_options.mpi_threads_disable", "library_options.num_nccl_streams",
    "library_options.ccl_bgt_affinity", "logging.hide_timestamp", "logging.with_timestamp",
})
_BY_KEY = {o.key: o for o in OPTIONS if o.key}
_SECTIONS = sorted({k.split(".")[0] for k in list(_BY_KEY) + list(IGNORED_KEYS)})
_CONTROLLERS = ("gloo", "mpi")
_CONTROLLER_NOTE = (
    "ring has one controller of its own: ringrun starts the workers, which talk over TCP and shared memory "
    "(as Gloo's do); --gloo and --mpi are accepted so that horovodrun command lines keep working, and change "
    "nothing")
_DESCRIPTIONS = {
    _PARAMS: "each option sets the engine variable named, in every worker's environment; a value is checked "
             "as the engine reads it",
    _CONTROLLER: _CONTROLLER_NOTE,
}


def add_tuning_options(parser: argparse.ArgumentParser) -> None:
    """Adds ``--config-file`` and the tuning options to ringrun's parser, grouped as horovodrun groups them."""
    parser.add_argument(
        "--config-file", metavar="FILE",
        help="a YAML file of settings in horovodrun's layout (params, autotune, timeline, stall_check, "
        "library_options, logging); options on the command line win over it")
    groups = {name: parser.add_argument_group(name, _DESCRIPTIONS.get(name)) for name in _GROUP_ORDER}
    exclusive: Dict[str, Any] = {}
    for option in OPTIONS:
        if option.switch is None:
            groups[option.group].add_argument(option.flag, dest=option.dest, metavar=option.metavar,
                                              help=f"{option.help} (sets {option.variable})")
            continue
        if option.dest not in exclusive:
            exclusive[option.dest] = groups[option.group].add_mutually_exclusive_group()
        exclusive[option.dest].add_argument(option.flag, dest=option.dest, action="store_const",
                                            const=option.switch,
                                            help=f"{option.help} (sets {option.variable}={option.switch})")
    controller = groups[_CONTROLLER].add_mutually_exclusive_group()
    controller.add_argument("--gloo", dest="controller", action="store_const", const="gloo",
                            help="accepted, changes nothing")
    controller.add_argument("--mpi", dest="controller", action="store_const", const="mpi",
                            help="accepted, changes nothing: to start the workers with mpirun, run "
                            "'mpirun -np N python train.py' without ringrun (init() reads mpirun's variables)")


def tuning_environment(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Dict[str, str]:
    """The engine variables the options and ``--config-file`` set, checked.

    Args:
        parser: Reports a bad value, naming the option or key (exits with status 2).
        args: The parsed arguments.

    Returns:
        ``{variable: value}`` for the workers' environment.
    """
    given: Dict[str, Tuple[Option, str, str]] = {}
    if args.config_file is not None:
        for option, source, text in _file_settings(parser, args.config_file):
            given[option.variable] = (option, source, text)
    for option in OPTIONS:
        text = getattr(args, option.dest)
        if text is not None and (option.switch is None or option.switch == text):
            given[option.variable] = (option, option.flag, text)
    if args.controller == "mpi":
        print(f"ringrun: --mpi: ringrun does not use mpirun; {_CONTROLLER_NOTE}", file=sys.stderr)
    env = {}
    for variable, (option, source, text) in given.items():
        try:
            value = option.kind.value(source, text)
        except ValueError as e:
            parser.error(str(e))
        env[variable] = option.env(value, text)
    return env


def _file_settings(parser: argparse.ArgumentParser, path: str) -> Iterator[Tuple[Option, str, str]]:
    """``(option, source, text)`` for each setting of the YAML file ``path``."""
    document = _load(parser, path)
    controller = document.pop("controller", None)
    if controller is not None and str(controller).lower() not in _CONTROLLERS:
        parser.error(f"--config-file {path}: controller should be gloo or mpi. Got: {controller!r}")
    for section, body in document.items():
        if section not in _SECTIONS:
            parser.error(f"--config-file {path}: unknown section {section!r}; the sections are controller, "
                         f"{', '.join(_SECTIONS)}")
        if body is None:
            continue
        if not isinstance(body, dict):
            parser.error(f"--config-file {path}: {section} should be a mapping of settings. Got: {body!r}")
        for name, value in body.items():
            key = f"{section}.{name}"
            if key in IGNORED_KEYS:
                print(f"ringrun: --config-file {path}: {key} has no counterpart in ring; ignored", file=sys.stderr)
                continue
            option = _BY_KEY.get(key)
            if option is None:
                known = sorted(k.split(".")[1] for k in _BY_KEY if k.startswith(section + "."))
                parser.error(f"--config-file {path}: unknown key {key!r}; {section} has {', '.join(known)}")
            if isinstance(value, (dict, list)):
                parser.error(f"--config-file {path}: {key} should be a single value. Got: {value!r}")
            if value is not None:
                yield option, f"--config-file {path}: {key}", _yaml_text(option, value)


def _load(parser: argparse.ArgumentParser, path: str) -> Dict[Any, Any]:
    try:
        import yaml
    except ImportError:
        parser.error("--config-file needs PyYAML: pip install pyyaml")
    try:
        with open(path, encoding="utf-8") as f:
            document = yaml.safe_load(f)
    except OSError as e:
        parser.error(f"--config-file: cannot read {path!r}: {e.strerror or e}")
    except yaml.YAMLError as e:
        parser.error(f"--config-file {path}: not valid YAML: {e}")
    if document is None:
        return {}
    if not isinstance(document, dict):
        parser.error(f"--config-file {path}: should be a mapping of sections. Got: {document!r}")
    return dict(document)


def _yaml_text(option: Option, value: Any) -> str:
    """A YAML value as the text the option's rule reads."""
    if isinstance(value, bool):
        value = value != option.inverted
        return "true" if value else "false"
    if option.inverted and isinstance(value, str):
        parsed = values.parse_bool(value)
        return value if parsed is None else ("false" if parsed else "true")
    return value if isinstance(value, str) else repr(value)
