"""The environment of a task started by Slurm's ``srun``."""

from __future__ import annotations

import os
import re
import socket
from typing import List, Mapping

from ring_strategy.environments.base import override
from ring_strategy.environments.external import (
    ExternalLauncherEnvironment,
    Layout,
    read_int,
    require_int,
)

__all__ = ["SlurmEnvironment", "expand_nodelist", "expand_tasks_per_node"]

_BRACKET = re.compile(r"\[([^\]]*)\]")
_TASKS = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def _split_top_level(text: str) -> List[str]:
    """Splits at commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_range(spec: str, nodelist: str) -> List[str]:
    values: List[str] = []
    for item in spec.split(","):
        lo, sep, hi = item.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"SLURM_NODELIST has a bad range {item!r}. Got: {nodelist!r}")
        if not sep:
            values.append(lo)
            continue
        width = len(lo)  # "01-03" keeps its zero padding
        values.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return values


def _expand_one(entry: str, nodelist: str) -> List[str]:
    match = _BRACKET.search(entry)
    if match is None:
        return [entry]
    head, tail = entry[: match.start()], entry[match.end():]
    return [head + value + rest
            for value in _expand_range(match.group(1), nodelist)
            for rest in _expand_one(tail, nodelist)]


def expand_nodelist(nodelist: str) -> List[str]:
    """Expands Slurm's compressed host list.

    Args:
        nodelist: E.g. ``"node[01-03,7],gpu[1-2]-ib"``.

    Returns:
        The host names in order, e.g. ``["node01", "node02", "node03",
        "node7", "gpu1-ib", "gpu2-ib"]``.

    Raises:
        ValueError: If the list is malformed; the message quotes it.
    """
    if nodelist.count("[") != nodelist.count("]"):
        raise ValueError(f"SLURM_NODELIST has unbalanced brackets. Got: {nodelist!r}")
    hosts: List[str] = []
    for entry in _split_top_level(nodelist):
        hosts.extend(_expand_one(entry, nodelist))
    return hosts


def expand_tasks_per_node(spec: str) -> List[int]:
    """Expands Slurm's tasks-per-node list.

    Args:
        spec: E.g. ``"2(x3),1"``.

    Returns:
        The number of tasks of each node, e.g. ``[2, 2, 2, 1]``.

    Raises:
        ValueError: If the list is malformed; the message quotes it.
    """
    counts: List[int] = []
    for item in spec.split(","):
        match = _TASKS.match(item.strip())
        if match is None:
            raise ValueError(f"SLURM_TASKS_PER_NODE should look like '2(x3),1'. Got: {spec!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


class SlurmEnvironment(ExternalLauncherEnvironment):
    """Reads the variables ``srun`` gives each task.

    ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS`` (else ``SLURM_NTASKS``),
    ``SLURM_LOCALID``, ``SLURM_NODEID`` and ``SLURM_STEP_NUM_NODES`` (else
    ``SLURM_NNODES``) place the task; the tasks on this node come from
    ``SLURM_STEP_TASKS_PER_NODE`` (else ``SLURM_TASKS_PER_NODE``). Only tasks of
    a job step are detected (``SLURM_STEP_ID`` is set): a batch script also
    sees ``SLURM_PROCID``, but a program it runs directly is a job of one.

    Rendezvous: rank 0 serves the store on the first node of
    ``SLURM_STEP_NODELIST`` (else ``SLURM_JOB_NODELIST``/``SLURM_NODELIST``;
    compressed lists such as ``node[01-03,7]`` are expanded), or on
    ``127.0.0.1`` when the step has one node, at ``RING_RENDEZVOUS_PORT`` or
    a port derived from ``SLURM_JOB_ID`` and ``SLURM_STEP_ID``. With the default
    block distribution rank 0 runs on that node; otherwise set
    ``RING_RENDEZVOUS_ADDR``.

    The job id and, unless ``RING_SECRET`` is set, the secret are derived from
    the job and step ids. Those are visible to every user of the cluster, so a
    derived secret only keeps jobs apart: export a random ``RING_SECRET`` (hex)
    in the batch script for protection.

    Args:
        environ: The variables to read; defaults to ``os.environ``.

    Raises:
        ValueError: If a variable is missing or invalid.
    """

    launcher = "slurm"

    @classmethod
    @override
    def detect(cls) -> bool:
        env = os.environ
        return "SLURM_PROCID" in env and ("SLURM_STEP_ID" in env or "SLURM_STEPID" in env)

    @override
    def _layout(self, env: Mapping[str, str]) -> Layout:
        rank = require_int(env, self.launcher, "SLURM_PROCID")
        size = require_int(env, self.launcher, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
        local_rank = require_int(env, self.launcher, "SLURM_LOCALID")
        cross_rank = read_int(env, "SLURM_NODEID") or 0
        cross_size = read_int(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES") or 1
        spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
        if spec:
            counts = expand_tasks_per_node(spec)
            if cross_rank >= len(counts):
                raise ValueError(f"SLURM_NODEID={cross_rank} is past the tasks per node {spec!r}")
            local_size = counts[cross_rank]
        elif cross_size == 1:
            local_size = size
        else:
            raise ValueError("slurm did not set SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE")
        return Layout(rank, size, local_rank, local_size, cross_rank, cross_size)

    @override
    def _job_key(self, env: Mapping[str, str], layout: Layout) -> str:
        names = ("SLURM_CLUSTER_NAME", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_RESTART_COUNT")
        job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
        if not job:
            raise ValueError("slurm did not set SLURM_JOB_ID")
        return "|".join([*(env.get(n, "") for n in names), job, env.get("SLURM_STEPID", ""),
                         str(layout.size)])

    @override
    def _rendezvous_host(self, env: Mapping[str, str]) -> str:
        for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
            if env.get(name):
                hosts = expand_nodelist(env[name])
                if hosts:
                    return hosts[0]
        raise ValueError("slurm did not set SLURM_STEP_NODELIST or SLURM_NODELIST")

    @override
    def _read_host_id(self, env: Mapping[str, str]) -> str:
        return env.get("SLURMD_NODENAME") or socket.gethostname()
