"""``ringrun``'s options for elastic jobs, and their checks.

A job is elastic when ``--min-np``, ``--max-np`` or ``--host-discovery-script``
is given. ``-H``/``--hostfile`` with ``--min-np`` gives fault tolerance on a
fixed set of hosts; a discovery script lets hosts come and go.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from typing import List, Optional, Tuple, Union

from ring_strategy import _config_values as values
from ring_strategy import _contracts as names
from ring_strategy.environments.elastic import elastic_timeout
from ring_strategy.runner.discovery import FixedHosts, HostDiscovery
from ring_strategy.runner.hosts import HostSlots

__all__ = ["ElasticSettings", "add_elastic_options", "elastic_settings"]

DEFAULT_DISCOVERY_INTERVAL = 1.0


@dataclasses.dataclass
class ElasticSettings:
    """An elastic job's checked options.

    Attributes:
        np: Workers to start with.
        min_np: Fewest workers the job trains with.
        max_np: Most workers (None: as many as the hosts' slots).
        discovery: Where workers may run.
        discovery_interval: Seconds between two runs of the discovery.
        reset_limit: Most resets (None: no limit).
        cooldown: ``(MIN, MAX)`` seconds a failed host is blacklisted for, or None (for good).
        elastic_timeout: Seconds the job may have fewer than ``min_np`` workers.
    """

    np: int
    min_np: int
    max_np: Optional[int]
    discovery: Union[HostDiscovery, FixedHosts]
    discovery_interval: float = DEFAULT_DISCOVERY_INTERVAL
    reset_limit: Optional[int] = None
    cooldown: Optional[Tuple[float, float]] = None
    elastic_timeout: float = 600.0


def add_elastic_options(parser: argparse.ArgumentParser) -> None:
    """Adds the elastic options to ringrun's parser."""
    group = parser.add_argument_group(
        "elastic jobs", "workers may leave and join while the job runs (see docs/elastic.md); "
        "any of --min-np, --max-np or --host-discovery-script makes a job elastic")
    group.add_argument("--min-np", "--min-num-proc", dest="min_np", action=values.IntegerOption, metavar="N",
                       help="fewest workers the job trains with (default: -np)")
    group.add_argument("--max-np", "--max-num-proc", dest="max_np", action=values.IntegerOption, metavar="N",
                       help="most workers the job grows to when hosts are added (default: every slot)")
    group.add_argument("--host-discovery-script", metavar="COMMAND",
                       help="prints the hosts workers may run on now, one 'host[:slots]' a line")
    group.add_argument("--discovery-interval", action=values.NumberOption, metavar="S",
                       help=f"seconds between runs of the discovery script (default: {DEFAULT_DISCOVERY_INTERVAL:g})")
    group.add_argument("--slots-per-host", action=values.IntegerOption, metavar="N",
                       help="slots of a discovered host printed without ':slots' (default: 1)")
    group.add_argument("--reset-limit", action=values.IntegerOption, metavar="N",
                       help="end the job with an error once it would reset more than N times (default: no limit)")
    group.add_argument("--blacklist-cooldown-range", action=values.NumberOption, nargs=2, metavar=("MIN", "MAX"),
                       help="a host where a worker failed gets no workers for a random MIN to MAX "
                       "seconds (default: never again)")
    group.add_argument("--elastic-timeout", action=values.NumberOption, metavar="S",
                       help="seconds the job may have fewer than --min-np workers before it fails "
                       f"(default: {names.ELASTIC_TIMEOUT}, HOROVOD_ELASTIC_TIMEOUT or 600)")


_ELASTIC_ONLY = ("discovery_interval", "slots_per_host", "reset_limit", "blacklist_cooldown_range", "elastic_timeout")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def elastic_settings(parser: argparse.ArgumentParser, args: argparse.Namespace,
                     hosts: Optional[List[HostSlots]]) -> Optional[ElasticSettings]:
    """The elastic job's settings, or None for a job that is not elastic.

    Args:
        parser: Reports bad combinations (exits with status 2).
        args: The parsed arguments.
        hosts: The hosts of ``-H``/``--hostfile``, or None.
    """
    if args.min_np is None and args.max_np is None and args.host_discovery_script is None:
        given = [_flag(d) for d in _ELASTIC_ONLY if getattr(args, d) is not None]
        if given:
            parser.error(f"{given[0]} is for elastic jobs: give --min-np, --max-np or --host-discovery-script too")
        return None
    script = args.host_discovery_script
    if script is not None and hosts is not None:
        parser.error("give either -H/--hostfile or --host-discovery-script, not both")
    if script is None and args.slots_per_host is not None:
        parser.error("--slots-per-host is for --host-discovery-script")
    np_, min_np, max_np = _sizes(parser, args, hosts)
    slots = args.slots_per_host if args.slots_per_host is not None else 1
    if slots < 1:
        parser.error(f"--slots-per-host should be a positive integer. Got: {slots}")
    discovery: Union[HostDiscovery, FixedHosts]
    if script is not None:
        discovery = HostDiscovery(script, slots)
    else:
        discovery = FixedHosts(hosts or [HostSlots("localhost", max(np_, max_np or 0))])
    return ElasticSettings(
        np=np_, min_np=min_np, max_np=max_np, discovery=discovery,
        discovery_interval=_positive(parser, "--discovery-interval", args.discovery_interval,
                                     DEFAULT_DISCOVERY_INTERVAL),
        reset_limit=_reset_limit(parser, args.reset_limit),
        cooldown=_cooldown(parser, args.blacklist_cooldown_range),
        elastic_timeout=_elastic_timeout(parser, args.elastic_timeout),
    )


def _sizes(parser: argparse.ArgumentParser, args: argparse.Namespace,
           hosts: Optional[List[HostSlots]]) -> Tuple[int, int, Optional[int]]:
    np_ = args.np
    if np_ is None:
        np_ = sum(h.slots for h in hosts) if hosts else args.min_np
    if np_ is None:
        parser.error("the number of workers to start is required: -np N")
    min_np = np_ if args.min_np is None else args.min_np
    for flag, value in (("-np", np_), ("--min-np", min_np), ("--max-np", args.max_np)):
        if value is not None and value < 1:
            parser.error(f"{flag} should be a positive integer. Got: {value}")
    if min_np > np_:
        parser.error(f"--min-np {min_np} should be at most -np {np_}")
    if args.max_np is not None and args.max_np < np_:
        parser.error(f"--max-np {args.max_np} should be at least -np {np_}")
    if hosts is not None and np_ > sum(h.slots for h in hosts):
        parser.error(f"-np {np_} is more than the {sum(h.slots for h in hosts)} slots of the hosts")
    return np_, min_np, args.max_np


def _positive(parser: argparse.ArgumentParser, flag: str, value: Optional[float], default: float) -> float:
    if value is None:
        return default
    if not (math.isfinite(value) and value > 0):
        parser.error(f"{flag} should be a positive number of seconds. Got: {value:g}")
    return value


def _reset_limit(parser: argparse.ArgumentParser, value: Optional[int]) -> Optional[int]:
    if value is not None and value < 0:
        parser.error(f"--reset-limit should be 0 or more. Got: {value}")
    return value


def _cooldown(parser: argparse.ArgumentParser, value: Optional[List[float]]) -> Optional[Tuple[float, float]]:
    if value is None:
        return None
    low, high = value
    if not (math.isfinite(low) and math.isfinite(high) and 0 <= low <= high):
        parser.error("--blacklist-cooldown-range should be MIN MAX seconds with 0 <= MIN <= MAX. "
                     f"Got: {low:g} {high:g}")
    return low, high


def _elastic_timeout(parser: argparse.ArgumentParser, value: Optional[float]) -> float:
    if value is not None:
        return _positive(parser, "--elastic-timeout", value, 0.0)
    try:
        return elastic_timeout(os.environ)
    except ValueError as e:
        parser.error(str(e))
    raise AssertionError("unreachable")
