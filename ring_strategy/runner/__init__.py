"""The ``ringrun`` launcher and its rendezvous store.

Nothing here imports the native engine, so the launcher starts fast and works
before the extension is built.
"""

from ring_strategy.runner.store import StoreAuthenticationError, StoreClient, StoreServer

__all__ = ["StoreAuthenticationError", "StoreClient", "StoreServer"]
