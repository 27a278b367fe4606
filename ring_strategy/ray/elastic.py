"""The worlds of an elastic :class:`~ring_strategy.ray.RayExecutor` job.

The executor is the job's driver (:class:`ring_strategy.runner.worlds.Worlds`
forms and publishes the worlds); each actor is an elastic worker, numbered
in the order the executor made it. While a function runs
(:meth:`RayWorlds.gather`):

- an actor that dies (``RayActorError``: killed, its process lost) has
  failed: the others form the next world without it (they notice the lost
  peer in the engine and reset into it, in their own processes), as long as
  at least ``min_workers`` are left; with fewer, the call fails;
- an actor whose function returned has finished: the next world, if any
  forms, leaves it out;
- when every member of the current world has asked for the next one (an
  elastic reset after a timeout, say), the same members form it;
- an actor that joins (``join`` returns it: the executor started it on
  room the cluster found, up to ``max_workers``) runs the same function:
  the next world adds it, and the others reset into that world at their
  next commit (``HostsUpdatedInterrupt``), where it receives their state;
- a function that raises ends the call with its error, as without elastic.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from ring_strategy.runner.worlds import Worlds

__all__ = ["RayWorlds"]

# Seconds between two looks at the actors' reset requests while a call runs.
_POLL_SECONDS = 0.1


class RayWorlds(Worlds):
    """Forms and publishes the worlds of one elastic executor job.

    Args:
        address: ``host:port`` of the executor's store.
        secret: The job secret.
        job_id: The job id.
        members: ``(worker, host)`` of every actor, the host being its Ray node id.
        min_workers: The fewest workers the job goes on with.
        timeout: Seconds for the store's replies.
    """

    def gather(self, ray: Any, refs: Dict[int, Any],
               join: Optional[Callable[[int], Dict[int, Tuple[Any, str]]]] = None) -> Dict[int, Any]:
        """Waits for the function each member runs (``refs``: worker -> ObjectRef)
        while the worlds change (see the module's docstring). ``join``, polled
        until a member finishes, returns the workers that join the call: worker
        -> ``(ref of the function it runs, host)``; its argument is the number
        of workers alive.

        Returns:
            The result of every worker that finished, by worker.

        Raises:
            RuntimeError: If fewer than ``min_workers`` actors are left.
            ray.exceptions.RayTaskError: The first error a function raised.
        """
        self.members = sorted(refs)  # the members of the current world, all running the function
        pending = {ref: worker for worker, ref in refs.items()}
        results: Dict[int, Any] = {}
        while pending:
            joined = join(len(self.members)) if join is not None and not results else {}
            for worker, (ref, _) in joined.items():
                pending[ref] = worker
            self.join({worker: host for worker, (_, host) in joined.items()})
            done, _ = ray.wait(list(pending), num_returns=1, timeout=_POLL_SECONDS)
            for ref in done:
                worker = pending.pop(ref)
                try:
                    results[worker] = ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    self._lost(worker, e)
                else:
                    self.finished(worker)  # no part of a next world
            if pending:
                self.poll_resets()
        return results

    def _lost(self, worker: int, error: BaseException) -> None:
        if not self.lost(worker):
            raise RuntimeError(
                f"RayExecutor: elastic worker {worker} was lost ({type(error).__name__}); "
                f"{len(self.members)} left, fewer than min_workers={self.min_workers}"
            ) from error
