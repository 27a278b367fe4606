"""``ringrun``: start the N worker processes of one job, on this host or many.

Usage::

    ringrun -np 2 python train.py --epochs 3
    ringrun -np 4 -H localhost:4 --start-timeout 120 python train.py
    ringrun -np 8 -H host1:4,host2:4 python train.py
    ringrun -np 8 --hostfile hosts.txt --ssh-port 2222 --output-filename logs python train.py
    ringrun -np 2 --min-np 1 --max-np 4 --host-discovery-script ./hosts.sh python train.py
    ringrun --check-build

ringrun makes a fresh job secret and job id, serves the rendezvous store, and
starts the workers, each in its own process group, with its place in the job
in ``RING_*`` environment variables (the secret travels only in environments
and over ssh's stdin, never on a command line). Ranks fill the hosts in the
order given. Workers on this host are started directly, those on other hosts
over one ssh session per host; workers on one host talk through shared
memory, across hosts over TCP. A job on this host alone listens on loopback
only. Every line a worker prints is prefixed with ``[rank]``. When a worker
fails, the others are terminated (SIGTERM, then SIGKILL after a grace period)
and ringrun exits with the failing worker's code (128 + N for a signal N).
SIGINT or SIGTERM to ringrun terminate all workers the same way, and ringrun
exits with 130 or 143.

With ``--min-np``, ``--max-np`` or ``--host-discovery-script`` the job is
elastic (:mod:`ring_strategy.runner.elastic_driver`): workers may fail,
leave and join while it runs.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from typing import List, Optional, Sequence

from ring_strategy import _config_values as values
from ring_strategy import _contracts as names
from ring_strategy.launcher_watch import GRACE_SECONDS
from ring_strategy.runner.elastic_args import ElasticSettings, add_elastic_options, elastic_settings
from ring_strategy.runner.hosts import HostSlots, assign_ranks, is_this_host, parse_hostfile, parse_hosts
from ring_strategy.runner.job import Job, JobPlan
from ring_strategy.runner.remote import SshSettings
from ring_strategy.runner.tuning_args import add_tuning_options, tuning_environment
from ring_strategy.runner.worker_env import worker_environment

__all__ = ["build_parser", "main", "worker_environment"]

DEFAULT_START_TIMEOUT_SECONDS = 60.0
DEFAULT_GRACE_SECONDS = GRACE_SECONDS  # what a worker whose ringrun is gone also waits by default


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of ``ringrun``."""
    parser = argparse.ArgumentParser(
        prog="ringrun",
        usage="%(prog)s [-np N] [-H HOST:SLOTS,... | --hostfile FILE] [options] COMMAND...\n"
              "       %(prog)s --check-build",
        description="Run a ring data-parallel job: N copies of COMMAND, one per rank.",
        epilog="Examples: ringrun -np 2 python train.py; "
               "ringrun -np 4 -H host1:2,host2:2 python train.py. "
               "RING_SSH_ARGS adds arguments to every ssh command line "
               "(e.g. '-o UserKnownHostsFile=/dev/null').",
    )
    parser.add_argument(
        "-cb", "--check-build", action="store_true",
        help="show the version, the frameworks, transports and GPU operations available, and exit",
    )
    parser.add_argument(
        "-np", "--num-proc", dest="np", action=values.IntegerOption, metavar="N",
        help="number of worker processes (default: the slots given by -H or --hostfile)",
    )
    hosts = parser.add_mutually_exclusive_group()
    hosts.add_argument(
        "-H", "--hosts", metavar="HOST:SLOTS",
        help="hosts and their slots, e.g. localhost:4 or host1:2,host2:2 (default: localhost:N)",
    )
    hosts.add_argument(
        "-hostfile", "--hostfile", metavar="FILE",
        help="a file with one host a line, as 'host slots=N' (or host:N)",
    )
    parser.add_argument(
        "--start-timeout", action=values.NumberOption, metavar="S", default=None,
        help="seconds the workers may take to start and find each other "
        f"(default: RING_START_TIMEOUT or {DEFAULT_START_TIMEOUT_SECONDS:g}); "
        "passed to them as RING_START_TIMEOUT",
    )
    parser.add_argument(
        "--grace-period", action=values.NumberOption, metavar="S", default=DEFAULT_GRACE_SECONDS,
        help="seconds between SIGTERM and SIGKILL when workers are stopped "
        f"(default: {DEFAULT_GRACE_SECONDS:g})",
    )
    _add_multi_host_options(parser)
    add_elastic_options(parser)
    add_tuning_options(parser)
    parser.add_argument(
        "--encrypt", action="store_true",
        help="encrypt and authenticate TCP traffic between workers (sets RING_ENCRYPT=1; AES-256-GCM with keys "
        "from the job secret; shared memory within a host is not encrypted)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="print what ringrun does",
    )
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="COMMAND...",
        help="the program each worker runs, with its arguments",
    )
    return parser


def _add_multi_host_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-p", "--ssh-port", action=values.IntegerOption, metavar="PORT",
        help="ssh port of the remote hosts (default: ssh's own, usually 22)",
    )
    parser.add_argument(
        "-i", "--ssh-identity-file", metavar="FILE",
        help="private key ssh authenticates with on the remote hosts",
    )
    parser.add_argument(
        "--network-interface", metavar="IFACE",
        help="on a multi-host job, the interface (e.g. eth0) whose IPv4 address every host "
        "uses for the rendezvous and its peers (default: the route between the hosts)",
    )
    parser.add_argument(
        "--output-filename", metavar="DIR",
        help="also write each rank's output to DIR/rank.N/stdout and DIR/rank.N/stderr "
        "(N padded with zeros)",
    )


def _hosts(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Optional[List[HostSlots]]:
    """The hosts of ``-H`` or ``--hostfile``, or None when neither was given."""
    try:
        if args.hosts is not None:
            return parse_hosts(args.hosts)
        if args.hostfile is not None:
            return parse_hostfile(args.hostfile)
    except ValueError as e:
        parser.error(f"{'-H' if args.hosts is not None else '--hostfile'}: {e}")
    except OSError as e:
        parser.error(f"--hostfile: cannot read {args.hostfile!r}: {e.strerror or e}")
    return None


def _start_timeout(parser: argparse.ArgumentParser, given: Optional[float]) -> float:
    start_timeout = given
    if start_timeout is None:
        try:
            start_timeout = values.read(os.environ, values.POSITIVE_SECONDS, names.START_TIMEOUT,
                                        "HOROVOD_START_TIMEOUT", default=DEFAULT_START_TIMEOUT_SECONDS)
        except ValueError as e:
            parser.error(str(e))
    if not (math.isfinite(start_timeout) and start_timeout > 0):
        parser.error(f"--start-timeout should be a positive number of seconds. Got: {start_timeout:g}")
    return start_timeout


def _grace_period(parser: argparse.ArgumentParser, given: float) -> float:
    # Not inf either: a worker that ignores SIGTERM would then never end.
    if not (math.isfinite(given) and given >= 0):
        parser.error(f"--grace-period should be a finite number of seconds, 0 or more. Got: {given:g}")
    return given


def _ssh_settings(parser: argparse.ArgumentParser, args: argparse.Namespace, start_timeout: float) -> SshSettings:
    if args.ssh_port is not None and not 0 < args.ssh_port < 65536:
        parser.error(f"--ssh-port should be in [1, 65535]. Got: {args.ssh_port}")
    identity = args.ssh_identity_file
    if identity is not None:
        identity = os.path.abspath(os.path.expanduser(identity))
        if not os.path.isfile(identity):
            parser.error(f"--ssh-identity-file: no such file: {args.ssh_identity_file!r}")
    raw = os.environ.get("RING_SSH_ARGS", "")
    try:
        extra = tuple(shlex.split(raw))
    except ValueError as e:
        parser.error(f"RING_SSH_ARGS should be ssh arguments as a shell would split them. Got: {raw!r} ({e})")
    return SshSettings(port=args.ssh_port, identity_file=identity, connect_timeout=start_timeout,
                       extra_args=extra)


def _check_interface(parser: argparse.ArgumentParser, name: Optional[str], remote: bool) -> None:
    """Fails early when this host, which serves the store, lacks the interface."""
    if name is None or not remote:
        return
    from ring_strategy.runner.bootstrap import interface_address

    try:
        interface_address(name)
    except OSError as e:
        parser.error(f"--network-interface: {e.strerror or e}")


def _output_dir(args: argparse.Namespace) -> Optional[str]:
    """``--output-filename`` as an absolute path, or None."""
    return None if args.output_filename is None else os.path.abspath(args.output_filename)


def _plan(parser: argparse.ArgumentParser, args: argparse.Namespace, command: List[str]) -> JobPlan:
    """Checks the options and places the ranks on the hosts."""
    hosts = _hosts(parser, args)
    np_ = args.np
    if np_ is None and hosts is not None:
        np_ = sum(h.slots for h in hosts)
    if np_ is None:
        parser.error("the number of workers is required: -np N")
    if np_ < 1:
        parser.error(f"-np should be a positive integer. Got: {np_}")
    if hosts is None:
        hosts = [HostSlots("localhost", np_)]
    try:
        placed = assign_ranks(hosts, np_)
    except ValueError as e:
        where = f"-H {args.hosts!r}" if args.hosts is not None else f"--hostfile {args.hostfile!r}"
        parser.error(f"{e} ({where})")
    start_timeout = _start_timeout(parser, args.start_timeout)
    grace = _grace_period(parser, args.grace_period)
    local = [is_this_host(h.hostname) for h in placed]
    _check_interface(parser, args.network_interface, remote=not all(local))
    return JobPlan(
        command=command, hosts=placed, local=local, size=np_, start_timeout=start_timeout,
        grace=grace, verbose=args.verbose, output_dir=_output_dir(args),
        ssh=_ssh_settings(parser, args, start_timeout), interface=args.network_interface,
    )


def _elastic_plan(parser: argparse.ArgumentParser, args: argparse.Namespace, command: List[str],
                  elastic: ElasticSettings) -> JobPlan:
    """The plan of an elastic job: its driver places the workers as hosts come and go."""
    start_timeout = _start_timeout(parser, args.start_timeout)
    _check_interface(parser, args.network_interface, remote=True)
    return JobPlan(command=command, hosts=[], local=[], size=elastic.np, start_timeout=start_timeout,
                   grace=_grace_period(parser, args.grace_period), verbose=args.verbose, output_dir=_output_dir(args),
                   ssh=_ssh_settings(parser, args, start_timeout), interface=args.network_interface)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs ``ringrun``.

    Args:
        argv: The arguments, without the program name; defaults to ``sys.argv[1:]``.

    Returns:
        The exit code: 0 when every worker succeeded, else the first failing
        worker's code (128 + N for a signal N), or 128 + N when ringrun itself
        received signal N.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.check_build:
        from ring_strategy.runner.check_build import print_check_build

        return print_check_build()
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("missing the command to run, e.g. ringrun -np 2 python train.py")
    elastic = elastic_settings(parser, args, _hosts(parser, args))
    plan = _elastic_plan(parser, args, command, elastic) if elastic else _plan(parser, args, command)
    # The workers inherit ringrun's environment, remote ones too.
    os.environ.update(tuning_environment(parser, args))
    if args.encrypt:
        os.environ["RING_ENCRYPT"] = "1"
    try:
        os.makedirs(plan.output_dir or ".", exist_ok=True)
    except OSError as e:
        parser.error(f"--output-filename: cannot create {args.output_filename!r}: {e.strerror or e}")
    if elastic:
        from ring_strategy.runner.elastic_driver import ElasticJob

        return ElasticJob(plan, elastic).run()
    return Job(plan).run()


if __name__ == "__main__":
    sys.exit(main())
