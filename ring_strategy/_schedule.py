"""When gradient reductions start: the rule the torch ``DistributedOptimizer``
and Lightning's ``RingStrategy`` share (through
:class:`ring_strategy.torch.grad_sync.GradientSync`).

``overlap``
    Each gradient's allreduce starts as soon as backward has produced it, so
    the last layers communicate while the first ones still compute. It pays
    only when the engine's background thread has a core of its own.
``after_backward``
    Nothing is sent during backward; one grouped allreduce of every gradient
    starts in ``step()`` (or ``synchronize()``). On a host with no spare core
    per rank this is faster: no thread competes with backward for the core,
    and one fused operation costs less than one per parameter.

``RING_GRADIENT_SCHEDULE`` chooses: ``auto`` (the default), ``overlap`` or
``after_backward``. ``auto`` is ``overlap`` when this process may run on at
least two CPUs of its own (:func:`cpus_per_rank`), else
``after_backward``. Results are the same either way (bitwise, since fusion
never changes a sum); only the time differs.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Mapping, Optional

from ring_strategy import _config_values as values
from ring_strategy import _native

__all__ = ["AFTER_BACKWARD", "OVERLAP", "VARIABLE", "cpus_per_rank", "forced", "gradient_schedule"]

OVERLAP = "overlap"
AFTER_BACKWARD = "after_backward"
VARIABLE = "RING_GRADIENT_SCHEDULE"
_CHOICES = ("auto", OVERLAP, AFTER_BACKWARD)
_KIND = values.word("auto, overlap or after_backward", _CHOICES)
# CPUs per rank from which overlapping pays (one for the rank's compute, one for its engine thread).
_OVERLAP_CPUS = 2.0


def cpus_per_rank(local_size: Optional[int] = None) -> float:
    """The CPUs this rank may count on. In a running job (``local_size``
    None) the engine's count, which also decides whether its waits spin:
    the rank's own CPUs when a launcher bound the ranks of its host to
    separate cores, else the CPUs they share divided by their number.
    Otherwise the CPUs this process may run on divided by ``local_size``
    (1 outside a job)."""
    if local_size is None:
        from ring_strategy._core import engine

        running = engine.cpus_per_rank()
        if running is not None:
            return running
        local_size = 1
    return _native.cpus_per_rank(int(local_size))


def gradient_schedule(given: Optional[str] = None, local_size: Optional[int] = None,
                      environ: Optional[Mapping[str, str]] = None) -> str:
    """``overlap`` or ``after_backward`` (see the module's docstring).

    Args:
        given: The schedule asked for in code (``auto``, ``overlap`` or
            ``after_backward``); None reads ``RING_GRADIENT_SCHEDULE``.
        local_size: Ranks on this host; None asks the running job (see
            :func:`cpus_per_rank`).
        environ: The variables to read (``os.environ`` by default).

    Raises:
        ValueError: For any other value, naming where it was given.
    """
    if given is None:
        choice = values.read(os.environ if environ is None else environ, _KIND, VARIABLE, default="auto")
    else:
        choice = _KIND.value("gradient_schedule", str(given))
    if choice != "auto":
        return choice
    return OVERLAP if cpus_per_rank(local_size) >= _OVERLAP_CPUS else AFTER_BACKWARD


@contextlib.contextmanager
def forced(schedule: str) -> Iterator[None]:
    """Sets ``RING_GRADIENT_SCHEDULE`` to ``schedule`` inside (as a user's
    environment would: optimizers made there use it), and restores it after."""
    before = os.environ.get(VARIABLE)
    os.environ[VARIABLE] = schedule
    try:
        yield
    finally:
        if before is None:
            del os.environ[VARIABLE]
        else:
            os.environ[VARIABLE] = before
