"""Exceptions raised by ring. They are defined once, in the native engine.

``RingError`` is the base class. Subclasses:

- ``BadArgumentError`` (also a ``ValueError``): invalid input; nothing was sent.
- ``MismatchError``: ranks submitted the same tensor name with different
  properties; raised on every rank, naming the tensor, the field and the ranks.
- ``PeerFailureError``: a peer process died or closed its connection.
- ``RingTimeoutError`` (also a ``TimeoutError``): no progress within
  ``RING_TIMEOUT_SECONDS``.
- ``ShutdownError``: used before ``init()`` or after ``shutdown()``.
"""

from ring_strategy._native import (
    BadArgumentError,
    MismatchError,
    PeerFailureError,
    RingError,
    RingTimeoutError,
    ShutdownError,
)

__all__ = [
    "RingError",
    "BadArgumentError",
    "MismatchError",
    "PeerFailureError",
    "RingTimeoutError",
    "ShutdownError",
]
