"""The callbacks under one namespace, as ``hvd.callbacks.X`` in scripts
written for ``horovod.keras`` or ``horovod.tensorflow.keras``::

    import keras_callbacks as hvd
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()]
"""

from keras_callbacks.broadcast_global_variables_callback import BroadcastGlobalVariablesCallback
from keras_callbacks.learning_rate_schedule_callback import LearningRateScheduleCallback
from keras_callbacks.learning_rate_warmup_callback import LearningRateWarmupCallback
from keras_callbacks.metric_average_callback import MetricAverageCallback

__all__ = [
    "BroadcastGlobalVariablesCallback", "MetricAverageCallback",
    "LearningRateScheduleCallback", "LearningRateWarmupCallback",
]
