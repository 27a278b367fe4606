"""What the Ray tests send to the workers of a RayExecutor beyond
:mod:`tests.workers.cluster_train` (whose functions this module re-exports).

The tests pickle both modules by value, so the workers need not import them.
"""

from __future__ import annotations

from tests.workers.cluster_train import IN, OUT, ROWS, STEPS, fail_on, lightning_fit, place_and_sum, torch_train

__all__ = ["IN", "OUT", "ROWS", "STEPS", "Counter", "fail_on", "lightning_fit", "place_and_sum", "torch_train"]


class Counter:
    """The object a RayExecutor started with ``executable_cls=Counter`` passes to ``execute``."""

    def __init__(self, start: int) -> None:
        self.value = start

    def bump(self) -> int:
        self.value += 1
        return self.value
