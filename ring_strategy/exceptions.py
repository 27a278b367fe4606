"""Exceptions raised by ring. They are defined once, in the native engine.

``RingError`` is the base class. Subclasses:

- ``BadArgumentError`` (also a ``ValueError``): invalid input; nothing was sent.
- ``MismatchError``: ranks submitted the same tensor name with different
  properties; raised on every rank, naming the tensor, the field and the ranks.
- ``HorovodInternalError``: the job lost a rank or timed out, as Horovod
  names it; elastic training loops catch it. Its subclasses:

  - ``PeerFailureError``: a peer process died or closed its connection.
  - ``RingTimeoutError`` (also a ``TimeoutError``): no progress within
    ``RING_TIMEOUT_SECONDS``.
- ``ShutdownError``: used before ``init()`` or after ``shutdown()``.

``HostsUpdatedInterrupt`` (not a ``RingError``) is Horovod's signal that the
hosts of an elastic job changed; ``skip_sync`` says whether the state may be
kept without a sync.
"""

from ring_strategy._native import (
    BadArgumentError,
    HorovodInternalError,
    MismatchError,
    PeerFailureError,
    RingError,
    RingTimeoutError,
    ShutdownError,
)


class HostsUpdatedInterrupt(RuntimeError):
    """The hosts of an elastic job changed.

    Args:
        skip_sync: Whether the state may be kept as it is, without a sync
            (only hosts were added, none removed).
    """

    def __init__(self, skip_sync: bool) -> None:
        super().__init__()
        self.skip_sync = skip_sync


__all__ = [
    "RingError",
    "BadArgumentError",
    "MismatchError",
    "PeerFailureError",
    "RingTimeoutError",
    "ShutdownError",
    "HorovodInternalError",
    "HostsUpdatedInterrupt",
]
