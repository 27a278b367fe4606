"""DistributedOptimizer: data-parallel gradient averaging for any Keras 3 optimizer.

The wrapper is a dynamic subclass of the user's optimizer class, created from
its config: ``isinstance(opt, keras.optimizers.Adam)`` holds, and
``get_config()``, ``from_config()`` and the model's ``save()`` behave as the
plain optimizer's (a saved model loads without ring installed; with
:func:`load_model` it loads with its optimizer wrapped again).

``apply()`` (which ``apply_gradients()`` and every backend's train step call)
first averages the gradients over all ranks, then applies them as the wrapped
optimizer would. The gradients travel in one fused host call per step: they
are flattened into one buffer per dtype inside the step (graph, jit or eager),
the buffers are allreduced by the native engine, and the result is split back.
On the torch backend the buffers go to :mod:`ring_strategy.torch` as they are
(CUDA tensors through the engine's GPU path); on TensorFlow and JAX, GPU
gradients are copied to host memory by the host call.
Either way the reduction works inside the compiled train step of every
backend: a ``tf.function`` on TensorFlow, ``jax.jit`` on JAX (an ordered
``io_callback``), plain tensors on torch (a graph break under
``torch.compile``, i.e. ``jit_compile=True``).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple, Type

import numpy as np

import keras
from keras import ops

from keras_callbacks._host import backend, host_call
from keras_callbacks.compression import Compression, Compressor
from ring_strategy import ops as ring_ops
from ring_strategy._fused import Flattener, fused_allreduce, reduce_except_local
from ring_strategy.process_sets import ProcessSet, averages_here, global_process_set
from ring_strategy.exceptions import BadArgumentError

__all__ = ["DistributedOptimizer", "PartialDistributedOptimizer", "load_model"]

_CLASSES: Dict[Tuple, Type] = {}


class _DistributedMixin:
    """Methods placed in front of the user's optimizer class in the MRO.

    Settings live on the dynamic class (``_ring_*``), so ``from_config`` of
    that class gives a distributed optimizer with the same settings.
    """

    _ring_compression: Type[Compressor] = Compression.none
    _ring_op: int = ring_ops.Average
    _ring_postscale: float = 1.0
    _ring_name: Optional[str] = None
    # Per instance, set by register_local_var / PartialDistributedOptimizer.
    _ring_local_ids: FrozenSet[int] = frozenset()
    _ring_scale_local: bool = True
    _ring_process_set: ProcessSet = global_process_set

    def _ring_shared(self) -> bool:
        """True when the gradients are averaged with other ranks."""
        return averages_here(self._ring_process_set)

    def register_local_var(self, var: Any) -> None:
        """Marks ``var`` as local to this rank: its gradient is not reduced,
        only divided by ``size()`` when the optimizer scales local gradients.

        Raises:
            NotImplementedError: with gradient accumulation (backward_passes_per_step > 1).
        """
        if self._ring_accumulates():
            raise NotImplementedError("local variables with backward_passes_per_step > 1 are not supported")
        self._ring_local_ids = self._ring_local_ids | {id(var)}

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        if grads and self._ring_shared() and not self._ring_accumulates():
            grads = self._ring_allreduce(grads, trainable_variables)
        return super().apply(grads, trainable_variables)

    def _ring_accumulates(self) -> bool:
        """With gradient accumulation (backward_passes_per_step > 1) the
        average is taken where Keras applies the accumulated gradients, just
        before clipping: once per update instead of once per batch (on the
        TensorFlow and torch backends; JAX evaluates that branch every step)."""
        return bool(self.gradient_accumulation_steps) and hasattr(super(), "_clip_gradients")

    def _clip_gradients(self, grads):
        if self._ring_accumulates() and self._ring_shared():
            grads = list(grads)
            if grads:
                grads = self._ring_allreduce(grads)
        return super()._clip_gradients(grads)

    def _ring_allreduce(self, grads: List[Any], variables: Optional[List[Any]] = None) -> List[Any]:
        """Averages ``grads`` over every rank in one host call (None stays
        None); the gradients of local variables (found in ``variables``, the
        optimizer's own when None) stay on their rank."""
        if self._ring_local_ids:
            variables = self._trainable_variables if variables is None else list(variables)
            local = [id(v) in self._ring_local_ids for v in variables]
            if any(local):
                return reduce_except_local(grads, local, self._ring_reduce, self._ring_scale_local,
                                           lambda g, n: g / n, self._ring_process_set)
        return self._ring_reduce(grads)

    def _ring_reduce(self, grads: List[Any]) -> List[Any]:
        compression = self._ring_compression
        present = [i for i, g in enumerate(grads) if g is not None]
        if not present:
            return list(grads)
        wire, ctxs = zip(*[compression.compress(_dense(grads[i])) for i in present])
        # Not self.name: Keras numbers optimizer names per process ("SGD_3"),
        # so they can differ between ranks. Steps run one after the other on
        # every backend, so a fixed name is never in flight twice.
        prefix = f"keras.DistributedOptimizer.{self._ring_name or 'grads'}"
        reduced = fused_allreduce(_KerasFlattener, wire, prefix, self._ring_op, postscale=self._ring_postscale,
                                  process_set=self._ring_process_set)
        out = list(grads)
        for i, r, ctx in zip(present, reduced, ctxs):
            out[i] = compression.decompress(r, ctx)
        return out


class _KerasFlattener(Flattener):
    @staticmethod
    def dtype_name(tensor: Any) -> str:
        return ops.dtype(tensor)

    @staticmethod
    def flatten(tensors: List[Any]) -> Any:
        flat = [ops.reshape(t, (-1,)) for t in tensors]
        return ops.concatenate(flat, axis=0) if len(flat) > 1 else flat[0]

    @staticmethod
    def split(flat: Any, likes: List[Any]) -> List[Any]:
        pieces, offset = [], 0
        for t in likes:
            shape = tuple(t.shape)
            n = int(np.prod(shape, dtype=np.int64))
            pieces.append(ops.reshape(flat[offset:offset + n], shape))
            offset += n
        return pieces

    @staticmethod
    def host_call(fn: Any, flats: List[Any]) -> List[Any]:
        return host_call(fn, flats, label="ring_allreduce_gradients")

    @staticmethod
    def native_group(tensors: List[Any], names: List[str], op: int, prescale: float, postscale: float,
                     process_set: ProcessSet) -> Optional[List[Any]]:
        """The gradients go to the engine as they are, through the backend's
        native operations: TensorFlow's op library and JAX's FFI handlers
        (when they could be loaded), and :mod:`ring_strategy.torch`, which
        reduces torch tensors where they are (CUDA tensors through the
        engine's GPU path, on torch's current stream)."""
        name = backend()
        if name == "tensorflow":
            from ring_strategy.tensorflow.native_ops import native_group_allreduce

            return native_group_allreduce(tensors, names, op, prescale, postscale, process_set)
        if name == "jax":
            from ring_strategy import jax_ops

            return jax_ops.native_group_allreduce(tensors, names, op, prescale, postscale, process_set)
        if name == "torch":
            return _torch_allreduce()(tensors, names, op, prescale, postscale, process_set)
        return None


_TORCH_ALLREDUCE: Optional[Callable[..., List[Any]]] = None


def _torch_allreduce() -> Callable[..., List[Any]]:
    """The torch backend's reduction. Under ``torch.compile`` (Keras'
    ``jit_compile=True``) it is one custom operator in the compiled graph
    (:mod:`ring_strategy.torch.compiled`), so the reduction breaks no graph;
    eagerly, the short path's handles."""
    global _TORCH_ALLREDUCE
    if _TORCH_ALLREDUCE is None:
        from ring_strategy.torch import compiled, mpi_ops

        def reduce(flats, names, op, prescale, postscale, process_set):
            if compiled.tracing():
                return compiled.allreduce_each(flats, names, op, prescale, postscale, process_set)
            # One group ("<group>.<i>" are the names _fused gave): one negotiation
            # and one fused transfer, 1.45 ms against 2.4 ms for six separate
            # handles of the 1.6 M-parameter MLP's gradients at np=2. Out of place:
            # a gradient may be a view of Keras' accumulators.
            group = names[0].rpartition(".")[0] or names[0]
            return mpi_ops.grouped_allreduce(list(flats), name=group, op=op, prescale_factor=prescale,
                                             postscale_factor=postscale, process_set=process_set)

        _TORCH_ALLREDUCE = reduce
    return _TORCH_ALLREDUCE


def _dense(g: Any) -> Any:
    if backend() == "tensorflow":
        import tensorflow as tf

        if isinstance(g, tf.IndexedSlices):
            return tf.convert_to_tensor(g)
    return g


def _distributed_class(base: type, compression: Type[Compressor], op: int, postscale: float,
                       name: Optional[str], process_set: ProcessSet) -> type:
    """The dynamic subclass of ``base`` with these settings (one per combination)."""
    key = (base, compression, op, postscale, name, id(process_set))
    cls = _CLASSES.get(key)
    if cls is None:
        cls = type(base.__name__, (_DistributedMixin, base), {
            "__module__": base.__module__,
            "__qualname__": base.__qualname__,
            "__doc__": base.__doc__,
            "_ring_compression": compression,
            "_ring_op": op,
            "_ring_postscale": postscale,
            "_ring_name": name,
            "_ring_process_set": process_set,
        })
        _CLASSES[key] = cls
    return cls


def DistributedOptimizer(
    optimizer: keras.optimizers.Optimizer,
    name: Optional[str] = None,
    compression: Type[Compressor] = Compression.none,
    backward_passes_per_step: int = 1,
    average_aggregated_gradients: bool = False,
    op: int = ring_ops.Average,
    process_set: ProcessSet = global_process_set,
    *,
    sparse_as_dense: bool = False,
    device_dense: str = "",
    device_sparse: str = "",
) -> keras.optimizers.Optimizer:
    """Wraps a Keras 3 optimizer so that gradients are averaged over all ranks.

    Create it before the optimizer is used (it is rebuilt from the optimizer's
    config; slot variables are not carried over) and pass it to
    ``model.compile``. On TensorFlow, compile with ``jit_compile=False``
    (the default on CPU): XLA cannot call out to the engine.

    Args:
        optimizer: a ``keras.optimizers.Optimizer`` (any subclass).
        name: prefix of the engine's tensor names (the same on every rank).
        compression: ``Compression.none`` (default), ``Compression.fp16`` or
            ``Compression.bf16``: the precision gradients travel in.
        backward_passes_per_step: number of batches whose gradients are
            accumulated locally (Keras ``gradient_accumulation_steps``) before
            the variables are updated. The accumulated gradients are
            averaged over the ranks once per update on the TensorFlow and
            torch backends (on JAX, which evaluates both branches of that
            choice, every batch).
        average_aggregated_gradients: with ``backward_passes_per_step > 1``,
            apply the mean of the accumulated gradients (True) or, as Horovod
            does by default, their sum (False).
        op: ``Average`` (default) or ``Sum`` over the ranks.
        process_set: the ranks that average (default: every rank); a rank
            outside it trains alone.
        sparse_as_dense: Horovod's switch to reduce sparse gradients
            (``tf.IndexedSlices``) as dense tensors. Accepted for scripts
            written for Horovod: ring reduces every gradient densely
            whatever its value, which gives the same numbers.
        device_dense: accepted for Horovod compatibility (the gradients'
            device decides where they are reduced).
        device_sparse: as ``device_dense``.

    Returns:
        An instance of a subclass of ``type(optimizer)``.

    Example::

        import keras, numpy as np, keras_callbacks as hvd
        hvd.init()
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
        model.compile(optimizer=opt, loss="mse")
        model.fit(np.ones((8, 4)), np.ones((8, 1)), verbose=0)
    """
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise BadArgumentError(f"optimizer should be a keras.optimizers.Optimizer. Got: {optimizer!r}")
    if isinstance(optimizer, _DistributedMixin):
        raise BadArgumentError(f"optimizer is already a DistributedOptimizer. Got: {optimizer!r}")
    if not (isinstance(compression, type) and issubclass(compression, Compressor)):
        raise BadArgumentError(
            f"compression should be Compression.none, Compression.fp16 or Compression.bf16. Got: {compression!r}"
        )
    if isinstance(backward_passes_per_step, bool) or not isinstance(backward_passes_per_step, (int, np.integer)) \
            or backward_passes_per_step < 1:
        raise BadArgumentError(f"backward_passes_per_step should be an integer >= 1. Got: {backward_passes_per_step!r}")
    if not isinstance(average_aggregated_gradients, bool):
        raise BadArgumentError(f"average_aggregated_gradients should be a bool. Got: {average_aggregated_gradients!r}")
    if op not in (ring_ops.Average, ring_ops.Sum) or isinstance(op, bool):
        raise BadArgumentError(f"op should be Average or Sum. Got: {op!r}")
    if name is not None and (not isinstance(name, str) or not name):
        raise BadArgumentError(f"name should be a non-empty string. Got: {name!r}")
    _check_horovod_arguments(sparse_as_dense, device_dense, device_sparse)
    config = optimizer.get_config()
    postscale = 1.0
    if backward_passes_per_step > 1:
        if config.get("gradient_accumulation_steps"):
            raise BadArgumentError(
                "set either the optimizer's gradient_accumulation_steps or backward_passes_per_step, not both. "
                f"Got: gradient_accumulation_steps={config['gradient_accumulation_steps']!r}"
            )
        config["gradient_accumulation_steps"] = int(backward_passes_per_step)
        if not average_aggregated_gradients:
            # Keras applies the mean of the accumulated gradients; Horovod their sum.
            postscale = float(backward_passes_per_step)
    if not isinstance(process_set, ProcessSet):
        raise BadArgumentError(f"process_set should be a ProcessSet. Got: {process_set!r}")
    cls = _distributed_class(type(optimizer), compression, int(op), postscale, name, process_set)
    return cls.from_config(config)


def _check_horovod_arguments(sparse_as_dense: Any, device_dense: Any, device_sparse: Any) -> None:
    """Horovod's arguments that ring accepts without acting on them, checked."""
    if not isinstance(sparse_as_dense, bool):
        raise BadArgumentError(f"sparse_as_dense should be a bool. Got: {sparse_as_dense!r}")
    for arg, value in (("device_dense", device_dense), ("device_sparse", device_sparse)):
        if not isinstance(value, str):
            raise BadArgumentError(f"{arg} should be a string. Got: {value!r}")


def PartialDistributedOptimizer(
    optimizer: keras.optimizers.Optimizer,
    name: Optional[str] = None,
    compression: Type[Compressor] = Compression.none,
    backward_passes_per_step: int = 1,
    average_aggregated_gradients: bool = False,
    op: int = ring_ops.Average,
    local_layers: Any = None,
    scale_local_gradients: bool = True,
    *,
    sparse_as_dense: bool = False,
    device_dense: str = "",
    device_sparse: str = "",
) -> keras.optimizers.Optimizer:
    """:func:`DistributedOptimizer`, except that the gradients of the
    trainable variables of ``local_layers`` are not reduced: each rank applies
    its own, divided by ``size()`` with ``scale_local_gradients``. For layers
    whose weights differ between ranks (model parallelism). More variables
    can be marked later with ``optimizer.register_local_var(var)``.

    Args:
        local_layers: a Keras layer or a list of them, built (their variables
            exist); None: every gradient is reduced.
        scale_local_gradients: divide the local gradients by ``size()``.

    The other arguments are :func:`DistributedOptimizer`'s.

    Raises:
        BadArgumentError: ``local_layers`` holds something that is not a
            Keras layer, or a layer that is not built.
        NotImplementedError: local layers with ``backward_passes_per_step > 1``.

    Example::

        opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.01), local_layers=[model.layers[-1]])
    """
    layers = [] if local_layers is None else [local_layers] if isinstance(local_layers, keras.layers.Layer) \
        else list(local_layers)
    for layer in layers:
        if not isinstance(layer, keras.layers.Layer) or not layer.built:
            raise BadArgumentError(f"local_layers should be built Keras layers. Got: {layer!r}")
    opt = DistributedOptimizer(optimizer, name, compression, backward_passes_per_step, average_aggregated_gradients, op,
                               sparse_as_dense=sparse_as_dense, device_dense=device_dense,
                               device_sparse=device_sparse)
    opt._ring_scale_local = bool(scale_local_gradients)
    for layer in layers:
        for var in layer.trainable_weights:
            opt.register_local_var(var)
    return opt


def _optimizer_classes() -> Dict[str, type]:
    found = {}
    for attr in dir(keras.optimizers):
        value = getattr(keras.optimizers, attr)
        if isinstance(value, type) and issubclass(value, keras.optimizers.Optimizer):
            found[value.__name__] = value
    return found


def load_model(
    filepath: Any,
    custom_optimizers: Optional[List[type]] = None,
    custom_objects: Optional[Dict[str, Any]] = None,
    compression: Type[Compressor] = Compression.none,
    **kwargs: Any,
) -> keras.Model:
    """``keras.models.load_model`` with the model's optimizer wrapped in a
    :func:`DistributedOptimizer` (its saved state restored).

    Args:
        filepath: the ``.keras`` file.
        custom_optimizers: optimizer classes of your own that the model may use.
        custom_objects: passed on to ``keras.models.load_model``.
        compression: the wrapped optimizer's compression.
        **kwargs: passed on to ``keras.models.load_model``.

    Example::

        model = keras_callbacks.load_model("model.keras")
    """
    classes = _optimizer_classes()
    for cls in custom_optimizers or []:
        classes[cls.__name__] = cls
    objects = {name: _distributed_class(cls, compression, ring_ops.Average, 1.0, None, global_process_set)
               for name, cls in classes.items()}
    objects.update(custom_objects or {})
    return keras.models.load_model(filepath, custom_objects=objects, **kwargs)
