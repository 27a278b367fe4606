"""``ring_strategy.run``: runs a Python function on every rank of a job and
returns each rank's result, as ``horovod.run``.

The caller pickles the function and its arguments (with ``cloudpickle`` when
it is installed, which also carries functions defined in ``__main__`` or
interactively; otherwise with ``pickle``, which names a function by its
module, so the workers must be able to import that module) into a fresh
directory, and starts ``ringrun`` with ``python -m
ring_strategy.runner.run_fn DIR`` as the workers' command. Each worker runs
the function and writes ``DIR/rank.<N>.result``: ``("ok", value)`` or
``("error", exception, traceback text)``. The directory must be reachable
from every host of the job (a shared filesystem for remote hosts).

An elastic job (``min_np``, ``max_np`` or ``host_discovery_script``) runs
its workers under ringrun's elastic driver: they have no fixed rank, so each
writes ``DIR/worker.<N>.result`` under its worker number, and beside it the
rank it had when the function returned. The job's result is then the list
of the final world's results, in rank order.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["run"]

_TASK = "task.pickle"


class RemoteTraceback(Exception):
    """The traceback of a worker's error, as the worker printed it."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _dumps(obj: Any) -> bytes:
    try:
        import cloudpickle
    except ImportError:
        return pickle.dumps(obj)
    return cloudpickle.dumps(obj)


def task_path(directory: str) -> str:
    """The file of the pickled ``(func, args, kwargs)`` in a job's directory."""
    return os.path.join(directory, _TASK)


def result_path(directory: str, rank: int) -> str:
    """The file of ``rank``'s outcome in a job's directory."""
    return os.path.join(directory, f"rank.{rank}.result")


def worker_result_path(directory: str, worker: int) -> str:
    """The file of elastic worker ``worker``'s outcome; ``.rank`` beside it
    holds the rank it had when the function returned (none: not initialized)."""
    return os.path.join(directory, f"worker.{worker}.result")


def reject_unsupported(api: str, options: Dict[str, Any], reason: str) -> None:
    """Raises NotImplementedError naming the ``options`` of ``api`` that are set (not None or False)."""
    given = sorted(name for name, value in options.items() if value not in (None, False))
    if given:
        raise NotImplementedError(f"{api} does not support {', '.join(given)} ({reason})")


def _elastic_options(min_np: Optional[int], max_np: Optional[int], host_discovery_script: Optional[str],
                     slots: Optional[int], reset_limit: Optional[int],
                     cooldown_range: Optional[Tuple[int, int]]) -> List[str]:
    """ringrun's elastic arguments for what is set (none: not elastic)."""
    options: List[str] = []
    for flag, value in (("--min-np", min_np), ("--max-np", max_np), ("--host-discovery-script", host_discovery_script),
                        ("--slots-per-host", slots), ("--reset-limit", reset_limit)):
        if value is not None:
            options += [flag, str(value)]
    if cooldown_range is not None:
        low, high = cooldown_range
        options += ["--blacklist-cooldown-range", str(low), str(high)]
    if options and not any(flag in options for flag in ("--min-np", "--max-np", "--host-discovery-script")):
        raise ValueError("slots, reset_limit and cooldown_range are for elastic jobs: give min_np, max_np or "
                         "host_discovery_script too")
    return options


def _collect_elastic(directory: str, returncode: int) -> List[Any]:
    """The final world's results in rank order; raises a failed worker's
    error when the job failed."""
    outcomes: Dict[int, Tuple[Any, ...]] = {}
    ranks: Dict[int, int] = {}
    for entry in os.listdir(directory):
        if entry.startswith("worker.") and entry.endswith(".result"):
            worker = int(entry.split(".")[1])
            with open(os.path.join(directory, entry), "rb") as f:
                outcomes[worker] = pickle.load(f)
            rank_file = os.path.join(directory, entry + ".rank")
            if os.path.exists(rank_file):
                with open(rank_file) as f:
                    ranks[worker] = int(f.read())
    errors = {w: o for w, o in outcomes.items() if o[0] == "error"}
    if returncode != 0:
        if errors:
            raise_first_error(errors)
        raise RuntimeError(f"ring_strategy.run: the elastic job failed (ringrun exit code {returncode})")
    # Workers that left the job before its end wrote nothing, or lost a peer.
    finished = sorted((ranks.get(w, w), w) for w, o in outcomes.items() if o[0] == "ok")
    return [outcomes[w][1] for _, w in finished]


def _ringrun_options(np: int, hosts: Optional[str], hostfile: Optional[str], start_timeout: Optional[float],
                     ssh_port: Optional[int], ssh_identity_file: Optional[str], output_filename: Optional[str],
                     verbose: Optional[int], network_interface: Optional[str]) -> List[str]:
    pairs: Sequence[Tuple[str, Any]] = (
        ("-np", np), ("-H", hosts), ("--hostfile", hostfile), ("--start-timeout", start_timeout),
        ("--ssh-port", ssh_port), ("--ssh-identity-file", ssh_identity_file),
        ("--output-filename", output_filename), ("--network-interface", network_interface),
    )
    options = [str(part) for flag, value in pairs if value is not None for part in (flag, value)]
    return options + (["--verbose"] if verbose else [])


def _worker_environment() -> Dict[str, str]:
    """This process's environment, with its import path appended to
    ``PYTHONPATH`` so that the workers find the modules it imported from."""
    env = dict(os.environ)
    known = env.get("PYTHONPATH", "").split(os.pathsep) if env.get("PYTHONPATH") else []
    extra = [p for p in sys.path if p and os.path.isdir(p) and p not in known]
    env["PYTHONPATH"] = os.pathsep.join(known + extra)
    return env


def _outcomes(directory: str, np: int) -> Dict[int, Tuple[Any, ...]]:
    """The outcome each rank wrote, by rank."""
    outcomes = {}
    for rank in range(np):
        path = result_path(directory, rank)
        if os.path.exists(path):
            with open(path, "rb") as f:
                outcomes[rank] = pickle.load(f)
    return outcomes


def raise_first_error(errors: Dict[int, Tuple[Any, ...]]) -> None:
    """Raises the error of the lowest rank that failed by itself: a rank
    that only lost a peer (HorovodInternalError) comes after the others."""
    native = sys.modules.get("ring_strategy._native")  # loaded when a worker's engine error was unpickled
    lost = getattr(native, "HorovodInternalError", ())
    rank = min(errors, key=lambda r: (isinstance(errors[r][1], lost), r))
    _, error, text = errors[rank]
    if not isinstance(error, BaseException):
        error = RuntimeError(f"rank {rank} failed: {error}")
    raise error from RemoteTraceback(f"rank {rank}:\n{text}")


def _collect(directory: str, np: int, returncode: int) -> List[Any]:
    """Each rank's result in rank order; raises a failed rank's error."""
    outcomes = _outcomes(directory, np)
    errors = {rank: outcome for rank, outcome in outcomes.items() if outcome[0] == "error"}
    if errors:
        raise_first_error(errors)
    missing = [rank for rank in range(np) if rank not in outcomes]
    if returncode != 0 or missing:
        raise RuntimeError(f"ring_strategy.run: the job failed (ringrun exit code {returncode}); "
                           f"ranks {missing} returned no result")
    return [outcomes[rank][1] for rank in range(np)]


def run(func: Callable[..., Any], args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None, np: int = 1,
        min_np: Optional[int] = None, max_np: Optional[int] = None, slots: Optional[int] = None,
        reset_limit: Optional[int] = None, cooldown_range: Optional[Tuple[int, int]] = None,
        hosts: Optional[str] = None, hostfile: Optional[str] = None, start_timeout: Optional[float] = None,
        ssh_port: Optional[int] = None, ssh_identity_file: Optional[str] = None, disable_cache: Optional[bool] = None,
        output_filename: Optional[str] = None, verbose: Optional[int] = None, use_gloo: Optional[bool] = None,
        use_mpi: Optional[bool] = None, mpi_args: Optional[str] = None, network_interface: Optional[str] = None,
        executable: Optional[str] = None, prefix_output_with_timestamp: bool = False,
        host_discovery_script: Optional[str] = None) -> List[Any]:
    """Runs ``func(*args, **kwargs)`` on ``np`` ranks launched by ringrun.

    ``func`` calls ``init()`` of the front end it uses itself, as in any
    script. The workers' output goes to this process's stdout and stderr.

    Args:
        func: The function; picklable (see the module's notes).
        args: Its positional arguments, picklable.
        kwargs: Its keyword arguments, picklable.
        np: Number of ranks.
        hosts: ``host:slots,...`` as ``ringrun -H`` (default: this host).
        hostfile: As ``ringrun --hostfile``.
        start_timeout: As ``ringrun --start-timeout``.
        ssh_port: As ``ringrun --ssh-port``.
        ssh_identity_file: As ``ringrun --ssh-identity-file``.
        output_filename: As ``ringrun --output-filename``.
        verbose: Whether ringrun says what it does.
        network_interface: As ``ringrun --network-interface``.
        executable: The Python interpreter of the workers (default: this one).
        disable_cache, use_gloo: Accepted and ignored (nothing to choose).
        min_np: An elastic job's fewest workers (``ringrun --min-np``).
        max_np: An elastic job's most workers (``ringrun --max-np``).
        host_discovery_script: A command printing the hosts available now,
            one ``host[:slots]`` a line (``ringrun --host-discovery-script``).
        slots: Slots of a discovered host printed without them.
        reset_limit: The most resets before the elastic job fails.
        cooldown_range: ``(min, max)`` seconds a host where a worker failed
            gets no workers (``ringrun --blacklist-cooldown-range``).
        use_mpi, mpi_args, prefix_output_with_timestamp: Not supported:
            raise NotImplementedError when set.

    Returns:
        The list of each rank's return value, in rank order; for an elastic
        job, of the ranks of the last world (workers that left the job
        before its end are not in it).

    Raises:
        The exception a rank raised (the lowest rank's, preferring one that
        did not merely lose a peer), with that rank's traceback as its
        ``__cause__``; RuntimeError when the job
        failed without a Python error (a rank killed, for instance).
    """
    reject_unsupported("ring_strategy.run", {
        "use_mpi": use_mpi, "mpi_args": mpi_args, "prefix_output_with_timestamp": prefix_output_with_timestamp,
    }, "MPI is not part of ringrun")
    elastic = _elastic_options(min_np, max_np, host_discovery_script, slots, reset_limit, cooldown_range)
    if not callable(func):
        raise TypeError(f"func should be callable. Got: {func!r}")
    if not isinstance(np, int) or isinstance(np, bool) or np < 1:
        raise ValueError(f"np should be a positive integer. Got: {np!r}")
    directory = tempfile.mkdtemp(prefix="ring-run-")
    try:
        with open(task_path(directory), "wb") as f:
            f.write(_dumps((func, tuple(args), dict(kwargs or {}))))
        command = [sys.executable, "-m", "ring_strategy.runner.launch",
                   *_ringrun_options(np, hosts, hostfile, start_timeout, ssh_port, ssh_identity_file,
                                     output_filename, verbose, network_interface), *elastic,
                   executable or sys.executable, "-m", "ring_strategy.runner.run_fn", directory]
        returncode = subprocess.run(command, env=_worker_environment()).returncode
        return _collect_elastic(directory, returncode) if elastic else _collect(directory, np, returncode)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_task(directory: str, number: Optional[int] = None) -> int:
    """A worker: runs the pickled task and writes its outcome to
    ``result_path(directory, number)``, ``number`` being this worker's rank
    (``RING_RANK``) unless given (an elastic worker's number: it has no fixed rank).

    The worker stops itself when its launcher dies (ringrun, or the Spark
    task that started it), from the start, not only once it has called ``init()``.
    """
    from ring_strategy import _contracts as names
    from ring_strategy.launcher_watch import watch_launcher

    watch_launcher()
    elastic = number is None and names.RANK not in os.environ and names.ELASTIC_WORKER in os.environ
    rank = int(os.environ[names.ELASTIC_WORKER if elastic else names.RANK]) if number is None else number
    path = worker_result_path(directory, rank) if elastic else result_path(directory, rank)
    try:
        with open(task_path(directory), "rb") as f:
            func, args, kwargs = pickle.load(f)
        outcome: Tuple[Any, ...] = ("ok", func(*args, **kwargs))
    except BaseException as e:  # noqa: BLE001 - handed to the caller
        outcome = ("error", e, traceback.format_exc())
    if elastic:
        _write_final_rank(path + ".rank")
    try:
        data = _dumps(outcome)
    except Exception as e:  # noqa: BLE001 - an unpicklable result or error
        text = outcome[2] if outcome[0] == "error" else ""
        data = pickle.dumps(("error", f"{type(e).__name__}: {e}", text or traceback.format_exc()))
    temporary = path + ".tmp"
    with open(temporary, "wb") as f:
        f.write(data)
    os.replace(temporary, path)
    return 0 if outcome[0] == "ok" else 1


def _write_final_rank(path: str) -> None:
    """Writes this worker's rank in its last world, if ring is still initialized."""
    from ring_strategy import basics

    if basics.is_initialized():
        with open(path, "w") as f:
            f.write(str(basics.rank()))


if __name__ == "__main__":
    sys.exit(run_task(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None))
