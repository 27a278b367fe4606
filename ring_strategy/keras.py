"""The Keras 3 front end: ``import ring_strategy.keras as hvd``, as
``import horovod.keras as hvd`` in a Horovod script.

This is the name to import. The code lives in :mod:`keras_callbacks`; every
name here is the same object as there, so ``import keras_callbacks as hvd``
keeps working and mixing the two is harmless. ``ring_strategy.keras.callbacks``
and ``ring_strategy.keras.elastic`` are ``keras_callbacks.callbacks`` and
``keras_callbacks.elastic``, as ``horovod.keras.callbacks`` and
``horovod.keras.elastic`` are in Horovod.

Example::

    import keras
    import ring_strategy.keras as hvd

    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
"""

import sys

import keras_callbacks
from keras_callbacks import *  # noqa: F401,F403 (the names of keras_callbacks.__all__)
from keras_callbacks import callbacks, elastic

__all__ = list(keras_callbacks.__all__)

# `import ring_strategy.keras.callbacks` and `from ring_strategy.keras.elastic
# import KerasState` find keras_callbacks' modules.
sys.modules[__name__ + ".callbacks"] = callbacks
sys.modules[__name__ + ".elastic"] = elastic
