"""The timeline: a Chrome trace of what the engine does with every tensor.

Rank 0 writes it (it sees every rank's negotiation); open it in Perfetto
(https://ui.perfetto.dev) or chrome://tracing. Start it with
``RING_TIMELINE=path`` (or ``HOROVOD_TIMELINE``), ``ringrun
--timeline-filename path``, or at run time (``RING_TIMELINE=DYNAMIC``: no
file until then)::

    ring_strategy.timeline.start_timeline("/tmp/trace.json", mark_cycles=True)
    ...  # the steps to look at
    ring_strategy.timeline.stop_timeline()

``python -m ring_strategy.timeline close FILE`` makes the file of a crashed
job valid JSON; ``python -m ring_strategy.timeline render FILE OUT.png``
draws it (docs/timeline.md explains how to read it).
"""

from __future__ import annotations

from ring_strategy.timeline.trace import close, load, phases

__all__ = ["close", "load", "phases", "start_timeline", "stop_timeline"]


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Starts writing the timeline to ``file_path`` (rank 0 writes; other ranks
    may call it too and it does nothing there). Replaces a timeline being written.

    Args:
        file_path: the trace file to create.
        mark_cycles: also mark every cycle of the engine (``CYCLE_START``).

    Raises:
        BadArgumentError: the file cannot be created.
        ShutdownError: ring is not initialized.
    """
    from ring_strategy._core import engine

    engine.start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline() -> None:
    """Stops writing the timeline and closes its file (valid JSON from then on)."""
    from ring_strategy._core import engine

    engine.stop_timeline()
