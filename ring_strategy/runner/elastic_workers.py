"""Where the elastic driver starts one worker, and how it reaches the store.

A worker placed on this machine is a child process (:class:`LocalWorkers`);
one placed on another host runs behind its own ssh session
(:class:`RemoteWorkers`), as the workers of a fixed job do. Each worker gets
its own group, so that one can fail, leave or be killed alone.

Addresses:

- The store listens on loopback when every worker can only be on this
  machine (fixed ``-H`` hosts that are all this machine, no
  ``--network-interface``); on ``--network-interface``'s address when it is
  given; else on every interface, since a discovery script may list another
  machine at any time (the store authenticates every request with the job
  secret).
- A worker dials the store on loopback when it runs here, else on this
  machine's address on the route to its host (or ``--network-interface``'s).
- Peers find each other per world: a worker advertises
  ``--network-interface``'s address when given, else the address on its
  route to the other hosts of the world
  (:class:`~ring_strategy.environments.ElasticEnvironment`).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Dict, Optional, Tuple, Union

from ring_strategy import _contracts as names
from ring_strategy.environments.network import join_address, route_address
from ring_strategy.runner.bootstrap import interface_address
from ring_strategy.runner.discovery import FixedHosts, HostDiscovery
from ring_strategy.runner.hosts import is_this_host
from ring_strategy.runner.job import JobPlan, LocalWorkers
from ring_strategy.runner.output import Output
from ring_strategy.runner.remote import RemoteWorkers, bootstrap_spec
from ring_strategy.runner.worker_env import forwarded_environment

__all__ = ["Group", "spans_machines", "start_worker", "store_address", "store_bind_host", "world_shm_paths"]

Group = Union[LocalWorkers, RemoteWorkers]


def spans_machines(discovery: Union[HostDiscovery, FixedHosts], interface: Optional[str]) -> bool:
    """Whether workers of the job may run on other machines than this one.

    Args:
        discovery: Where workers may run.
        interface: ``--network-interface``, or None.
    """
    if interface:
        return True
    if isinstance(discovery, FixedHosts):
        return not all(is_this_host(h.hostname) for h in discovery.hosts)
    return True


def store_bind_host(plan: JobPlan, spans: bool) -> str:
    """The address the job's store listens on (see the module's docstring)."""
    if plan.interface:
        return interface_address(plan.interface)
    return "0.0.0.0" if spans else "127.0.0.1"


def store_address(plan: JobPlan, port: int, host: Optional[str] = None) -> str:
    """The store's address as a worker on ``host`` dials it (None: this
    machine, the driver's own workers and client)."""
    if plan.interface:
        return join_address(interface_address(plan.interface), port)
    if host is None:
        return join_address("127.0.0.1", port)
    return join_address(route_address(join_address(host, 22)), port)


def start_worker(plan: JobPlan, host: str, here: bool, number: int, env: Dict[str, str], job_id: str, output: Output,
                 events: "object", slots: int = 1) -> Tuple[Group, Optional[int]]:
    """Starts worker ``number`` on ``host`` with the job variables ``env``.

    Args:
        plan: The job's command, timeouts, ssh settings and interface.
        host: Where the worker runs.
        here: Whether ``host`` is this machine.
        number: The worker's number (its label in the output and the exit events).
        env: Its environment (:func:`~ring_strategy.runner.worker_env.elastic_worker_environment`:
            on ringrun's own environment here, with the job variables only on another host).
        job_id: The job id.
        output: Where its lines go.
        events: Receives ``("exit", number, returncode)``.
        slots: The workers ``host`` may run (another host's bootstrap gives
            this one its share of that host's CPUs; here ``env`` has it).

    Returns:
        The worker's group, and None when it started, else ringrun's exit
        code (127: no such program or no ssh, 126: cannot run it).
    """
    group: Group
    if here:
        if plan.interface:
            env = dict(env, **{names.ADVERTISE_HOST: interface_address(plan.interface)})
        group = LocalWorkers(plan.command, {number: env}, output, events, plan.grace)  # type: ignore[arg-type]
    else:
        spec = bootstrap_spec(
            command=plan.command, cwd=os.getcwd(), job_id=job_id, grace=plan.grace, interface=plan.interface,
            env=forwarded_environment(os.environ), workers={number: env}, local_size=slots,
        )
        spec["shm_paths"] = []  # a worker's segments are named by world: added as it joins worlds
        group = RemoteWorkers(host, spec, plan.ssh, sys.executable, output, events,  # type: ignore[arg-type]
                              plan.start_timeout, plan.verbose)
    return group, group.start()


def world_shm_paths(job_id: str, generation: int, rank: int) -> str:
    """The JSON list of the shared-memory files rank ``rank`` of world
    ``generation`` creates: what a remote worker's host removes once it exited."""
    return json.dumps(names.shm_segment_paths(names.world_job_id(job_id, generation), [rank]))
