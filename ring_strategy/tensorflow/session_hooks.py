"""BroadcastGlobalVariablesHook: the session hook that starts every rank of
a graph-mode (TensorFlow 1-style) script from the same variables."""

from __future__ import annotations

from typing import Any, Optional

import tensorflow as tf

from ring_strategy._core.rules import check_root
from ring_strategy.tensorflow.functions import broadcast_global_variables


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Broadcasts every global variable from ``root_rank`` once the session
    is created (after the variables are initialized or restored), so that
    all ranks start from the same weights.

    The broadcast op is built in ``begin()``, before the graph is finalized:
    create the hook's session after the model and the optimizer (whose
    slot variables are global variables too).

    Args:
        root_rank: the rank whose variables everyone receives.
        device: accepted for Horovod compatibility (CPU only).

    Example::

        hooks = [hvd.BroadcastGlobalVariablesHook(0)]
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks, config=config) as sess:
            while not sess.should_stop():
                sess.run(train_op)
    """

    def __init__(self, root_rank: int, device: str = ""):
        super().__init__()
        self.root_rank = check_root(root_rank)
        self.device = device
        self.bcast_op: Optional[tf.Operation] = None

    def begin(self) -> None:
        if self.bcast_op is None or self.bcast_op.graph is not tf.compat.v1.get_default_graph():
            self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session: Any, coord: Any) -> None:
        session.run(self.bcast_op)
