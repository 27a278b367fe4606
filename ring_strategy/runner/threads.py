"""Each rank's share of its host's cores, as the compute thread settings
ringrun gives its workers.

Every framework starts one compute thread per core in every process, so N
ranks on a host of C cores would run N x C threads on C cores (plain
Keras-on-torch on 2 cores at np=2 fell from 12.7k to 0.66k samples/s a
rank). A worker gets, for each setting it does not have already, its share
``max(1, C // N)`` (C: the CPUs its launcher may run on; N: the ranks on its
host); an ``OMP_NUM_THREADS`` the user set is the share for the others too:

- ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``: OpenMP and MKL, torch's
  intra-op threads;
- ``TF_NUM_INTRAOP_THREADS``, ``TF_NUM_INTEROP_THREADS``: TensorFlow;
- ``XLA_FLAGS`` += ``--xla_cpu_multi_thread_eigen=... 
  intra_op_parallelism_threads=N``: JAX on the CPU, unless XLA_FLAGS names
  either already.

torchrun makes the same choice (``OMP_NUM_THREADS=1`` for every
multi-process job). Every launcher calls this one rule where its workers
run, for the CPUs there:

- ringrun, for the workers it starts here; its bootstrap on another host
  runs this module's source, sent in the job spec, on that host;
- the Lightning self-launcher, for its children and itself (rank 0);
- a Ray actor and a Spark task, for the worker they run.

A worker that already runs (rank 0 of a self-launched job, a Ray actor)
takes the rule with :func:`apply_here`. Each launcher says once, for rank
0's host, what it chose (:func:`describe`; ringrun only with ``-v``).
"""

from __future__ import annotations

import os
import sys
from typing import Dict, Mapping, MutableMapping, Optional

__all__ = ["VARIABLES", "host_cpus", "thread_variables", "apply_here", "describe"]

VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
_XLA_SETTINGS = ("xla_cpu_multi_thread_eigen", "intra_op_parallelism_threads")


def host_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _user_share(env: Mapping[str, str]) -> Optional[int]:
    """The user's OMP_NUM_THREADS, when it is a positive integer."""
    try:
        n = int(env.get("OMP_NUM_THREADS", ""))
    except ValueError:
        return None
    return n if n > 0 else None


def share(env: Mapping[str, str], local_size: int, cpus: Optional[int] = None) -> int:
    """A rank's threads: the user's OMP_NUM_THREADS, else its share of the CPUs."""
    return _user_share(env) or max(1, (host_cpus() if cpus is None else cpus) // max(1, local_size))


def thread_variables(env: Mapping[str, str], local_size: int, cpus: Optional[int] = None) -> Dict[str, str]:
    """The variables to add to a worker's environment ``env`` (nothing it
    has already) for ``local_size`` ranks on a host of ``cpus`` CPUs."""
    n = share(env, local_size, cpus)
    out = {name: str(n) for name in VARIABLES if name not in env}
    xla = env.get("XLA_FLAGS", "")
    if not any(setting in xla for setting in _XLA_SETTINGS):
        multi = "true" if n > 1 else "false"
        out["XLA_FLAGS"] = f"{xla} --xla_cpu_multi_thread_eigen={multi} intra_op_parallelism_threads={n}".strip()
    return out


def apply_here(local_size: int, env: Optional[MutableMapping[str, str]] = None) -> Dict[str, str]:
    """Gives this running process its share: adds :func:`thread_variables`
    to ``env`` (``os.environ`` by default) and, as frameworks imported
    already read their variables when they loaded, sets torch's and
    TensorFlow's own thread counts where the rule chose them.

    Returns:
        The variables added.
    """
    env = os.environ if env is None else env
    added = thread_variables(env, local_size)
    env.update(added)
    torch = sys.modules.get("torch")
    if torch is not None and "OMP_NUM_THREADS" in added:
        torch.set_num_threads(int(added["OMP_NUM_THREADS"]))
    tf = sys.modules.get("tensorflow")
    for name, setter in (("TF_NUM_INTRAOP_THREADS", "set_intra_op_parallelism_threads"),
                         ("TF_NUM_INTEROP_THREADS", "set_inter_op_parallelism_threads")):
        if tf is not None and name in added:
            try:
                getattr(tf.config.threading, setter)(int(added[name]))
            except (RuntimeError, AttributeError):  # its runtime started already: it keeps its threads
                pass
    return added


def describe(env: Mapping[str, str], local_size: int, cpus: Optional[int] = None) -> str:
    """The one line about the choice for ``local_size`` ranks on this host,
    whose environment (before the rule) is ``env``."""
    cpus = host_cpus() if cpus is None else cpus
    n = share(env, local_size, cpus)
    why = "OMP_NUM_THREADS as set" if _user_share(env) else f"{cpus} CPUs / {local_size} ranks on this host"
    return (f"each rank computes with {n} thread{'s' if n != 1 else ''} ({why}): OMP_NUM_THREADS, MKL, "
            f"TensorFlow and XLA settings not already set; set OMP_NUM_THREADS to choose")
