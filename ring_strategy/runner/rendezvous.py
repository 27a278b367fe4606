"""``init()``'s rendezvous, beside the store it runs on: every rank
publishes its engine's endpoint under the world's keys
(:func:`ring_strategy._contracts.rendezvous_key`), reads its peers' and
connects; the ranks then wait for each other twice (connected, done) so
that no one removes shared-memory names or stops the store too early.
Nothing here touches the engine: the caller hands over its endpoint and a
``connect`` function.
"""

from __future__ import annotations

from typing import Callable, List, Optional

from ring_strategy import _contracts
from ring_strategy.environments import ClusterEnvironment
from ring_strategy.exceptions import ShutdownError
from ring_strategy.runner.store import StoreClient, StoreServer


def rendezvous(env: ClusterEnvironment, endpoint: str, connect: Callable[[List[str]], None], generation: int,
               timeout: float) -> None:
    """Publishes this rank's engine ``endpoint``, reads every peer's and
    hands the list (in rank order) to ``connect``; returns once every rank
    has connected.

    Under a launcher that serves no store (torchrun, mpirun, Slurm), rank 0
    serves it for the duration of the rendezvous.

    Raises:
        ShutdownError: the launcher gave no rendezvous address or secret.
    """
    if env.rendezvous_address is None or env.secret is None:
        raise ShutdownError(
            f"rank {env.rank} of {env.size}: the launcher gave no rendezvous address or secret"
        )
    server = _serve_rendezvous(env)
    try:
        store = StoreClient(env.rendezvous_address, env.secret, timeout=timeout)
        try:
            prefix = _contracts.rendezvous_key(env.job_id, generation)
            store.set(f"{prefix}/endpoint/{env.rank}", endpoint.encode())
            endpoints = [
                store.get(f"{prefix}/endpoint/{r}", timeout=timeout).decode()
                for r in range(env.size)
            ]
            connect(endpoints)
            # Every rank must have mapped the others' shared memory before names
            # are removed in start().
            _all_reach(store, f"{prefix}/connected", env, timeout)
            _finish(store, f"{prefix}/done", env, timeout, serving=server is not None)
        finally:
            store.close()
    finally:
        if server is not None:
            server.stop()


def _all_reach(store: StoreClient, key: str, env: ClusterEnvironment, timeout: float) -> None:
    """Marks ``key`` reached by this rank and waits until every rank has."""
    store.set(f"{key}/{env.rank}", b"1")
    for r in range(env.size):
        store.get(f"{key}/{r}", timeout=timeout)


def _finish(store: StoreClient, key: str, env: ClusterEnvironment, timeout: float, serving: bool) -> None:
    """Tells the rank serving the store (if any) that this rank no longer needs it.

    The serving rank waits for every rank's word, so no one is still reading
    when it stops the store. It may stop it while the last word's reply is on
    its way: the word was stored by then, so a lost connection here is fine.
    """
    if serving:
        _all_reach(store, key, env, timeout)
        return
    try:
        store.set(f"{key}/{env.rank}", b"1")
    except ConnectionError:
        pass


def _serve_rendezvous(env: ClusterEnvironment) -> Optional[StoreServer]:
    """Starts the store this process must serve (rank 0 without a launcher's store), if any."""
    address = env.rendezvous_bind_address
    if address is None:
        return None
    host, _, port = address.rpartition(":")
    server = StoreServer(env.secret or b"", host=host.strip("[]"), port=int(port))
    try:
        server.start()
    except OSError as e:
        raise OSError(
            e.errno,
            f"rank {env.rank} cannot serve the rendezvous store on {address}: {e.strerror or e}; "
            "if another job holds the port, set RING_RENDEZVOUS_PORT to a free one",
        ) from None
    return server
