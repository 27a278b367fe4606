"""The interface every measured library implements: ring itself and the peers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Dict, List

import numpy as np

__all__ = ["Backend", "Call", "StepCall"]

# Runs the operation once and returns its result on this rank.
Call = Callable[[], np.ndarray]
# Runs one step of the small-tensors case and returns every result.
StepCall = Callable[[], List[np.ndarray]]


class Backend(ABC):
    """A library that runs collectives in this process.

    The timing loop calls :meth:`prepare` once per row and then the returned
    function many times, so a backend sets up buffers in :meth:`prepare` and
    keeps the returned call to the bare operation.
    """

    #: The name printed in the table and the JSON rows.
    name: str = ""

    def supports(self, op: str, dtype: np.dtype) -> bool:
        """Whether this backend can run ``op`` on ``dtype`` (rows it cannot run
        print n/a)."""
        return True

    @abstractmethod
    def prepare(self, op: str, send: np.ndarray) -> Call:
        """Returns a call that runs ``op`` on ``send``.

        Args:
            op: One of :data:`ring_strategy.bench.collectives.OPS`; reductions
                are sums, broadcasts come from rank 0.
            send: This rank's input; the backend may copy it but must not
                change it.

        Returns:
            A function without arguments that runs the operation once,
            blocking until it is complete on this rank, and returns the result
            (a numpy view of the backend's buffer is fine).
        """

    @abstractmethod
    def small_tensor_steps(self, tensors: List[np.ndarray]) -> Dict[str, StepCall]:
        """Ways of summing many small tensors over all ranks in one step.

        Args:
            tensors: This rank's inputs; not changed.

        Returns:
            Variant name (printed as is) to a call that sums every tensor over
            all ranks and returns the results in order.
        """

    def end_turn(self) -> None:
        """Returns once every rank has finished this backend's turn, inside
        the backend's own library (its barrier). A library that makes
        progress only while its own calls run (MPI's nonblocking requests)
        may still need a peer's help when the fastest rank's calls return;
        ending the turn in ring's barrier instead would leave that peer
        waiting there while the other waits in the library: a deadlock.
        The default (ring itself) does nothing: ring's barrier follows."""

    def close(self) -> None:
        """Releases the backend's resources; the default does nothing."""
