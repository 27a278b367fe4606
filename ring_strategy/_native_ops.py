"""Which way each framework's collectives reach the engine, as DESIGN.md
orders them: a native operation of the framework when it can be built and
loaded, else the host-call fallback (:mod:`ring_strategy._host_call`), with
a warning that names the reason.

- TensorFlow: the op library (native/frameworks/tensorflow), packaged at
  install time or built on first use (:mod:`ring_strategy._op_build`),
  loaded with ``tf.load_op_library`` and handed the engine's C interface.
- JAX: the XLA FFI handlers compiled into ``_native`` when jaxlib's headers
  were found at build time (host memory, and GPU memory on XLA's stream),
  registered with JAX here and called by :mod:`ring_strategy.jax_ops`.

``RING_NATIVE_OPS=0`` forces the fallback for both (``ringrun
--check-build`` shows what is used). Nothing here imports a framework
before it is asked for.
"""

from __future__ import annotations

import ctypes
import os
import threading
import warnings
from pathlib import Path
from typing import Any, Dict, FrozenSet, Optional, Set, Tuple

from ring_strategy import _config_values as values

ENV = "RING_NATIVE_OPS"
_lock = threading.Lock()
# framework -> (loaded module or library, or None; why not, or how)
_found: Dict[str, Tuple[Any, str]] = {}


def enabled() -> bool:
    """False when ``RING_NATIVE_OPS`` turns the native operations off."""
    return bool(values.read(os.environ, values.boolean(), ENV, default=True))


def _load_tensorflow() -> Tuple[Any, str]:
    import tensorflow as tf

    from ring_strategy import _native, _op_build

    packaged = Path(_op_build.__file__).parent / _op_build.library_name(tf.__version__)
    try:
        path = packaged if packaged.exists() else _op_build.cached_library(tf.__version__)
    except _op_build.BuildError as e:
        return None, str(e)
    try:
        lib = tf.load_op_library(str(path))
    except Exception as e:  # noqa: BLE001 - TensorFlow raises NotFoundError and others
        return None, f"{path} does not load into TensorFlow {tf.__version__}: {e}"
    cdll = ctypes.CDLL(str(path))
    if cdll.ring_tf_set_engine_api(ctypes.c_void_p(_native.engine_api_address())) != 0:
        return None, f"{path} was built for another version of ring's engine interface"
    # The XLA lowering (jit_compile=True) is built where TensorFlow's XLA headers compile.
    lib.ring_has_xla = hasattr(cdll, "ring_tf_has_xla") and cdll.ring_tf_has_xla() == 1
    lib.ring_has_xla_gpu = hasattr(cdll, "ring_tf_has_xla_gpu") and cdll.ring_tf_has_xla_gpu() == 1
    xla = "with its XLA lowering" + (" (host and GPU)" if lib.ring_has_xla_gpu else "") if lib.ring_has_xla else (
        "without its XLA lowering")
    return lib, f"op library {path.name}, {xla}"


def _load_jax() -> Tuple[Any, str]:
    from ring_strategy import _native

    if not getattr(_native, "HAS_XLA_FFI", False):
        return None, "ring's extension was built without jaxlib's XLA FFI headers"
    import jax

    # Registered here, once per process (native() caches the outcome), so
    # jax_ops, which asks this module, need not be imported by it: the host
    # handler always, the CUDA one (XLA's stream to the engine) where JAX
    # has a GPU backend.
    for name, capsule in _native.xla_ffi_handlers("cpu").items():
        jax.ffi.register_ffi_target(name, capsule, platform="cpu")
    _jax_platforms.add("cpu")
    if _jax_has_cuda(jax):
        from ring_strategy.build_queries import gpu_info

        gpu_info()  # finds NCCL (an nvidia-nccl wheel's too) before the handler's first GPU operation
        for name, capsule in _native.xla_ffi_handlers("CUDA").items():
            jax.ffi.register_ffi_target(name, capsule, platform="CUDA")
        _jax_platforms.add("gpu")
    return _native, "XLA FFI handlers" + (", host and CUDA" if "gpu" in _jax_platforms else "")


# The jax.default_backend() names ring's FFI target is registered for.
_jax_platforms: Set[str] = set()


def _jax_has_cuda(jax: Any) -> bool:
    """True when JAX has a CUDA GPU backend (not ROCm: no handler for it)."""
    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:  # no CUDA backend
        return False


def jax_platforms() -> FrozenSet[str]:
    """The JAX platforms (``jax.default_backend()`` names) ring's FFI
    collectives run on: empty without the handlers, ``cpu``, and ``gpu``
    where JAX has a CUDA backend."""
    return frozenset(_jax_platforms) if native("jax") is not None else frozenset()


_LOADERS = {"tensorflow": _load_tensorflow, "jax": _load_jax}


def native(framework: str) -> Optional[Any]:
    """The framework's native operations (the TensorFlow op library, the JAX
    FFI module), or None: then the caller uses host calls. The first None
    warns once with the reason."""
    with _lock:
        if framework not in _found:
            if not enabled():
                _found[framework] = (None, f"{ENV}=0 turns the native operations off")
            else:
                _found[framework] = _LOADERS[framework]()
                if _found[framework][0] is None:
                    warnings.warn(f"ring: {framework}'s native collectives are unavailable, so they run as host "
                                  f"calls (slower; no GPU tensors without a copy): {_found[framework][1]}",
                                  RuntimeWarning, stacklevel=3)
        return _found[framework][0]


def describe(framework: str) -> str:
    """How ``framework``'s collectives reach the engine, in words (``native``
    is called first)."""
    lib = native(framework)
    how = _found[framework][1]
    return f"native ({how})" if lib is not None else f"host calls ({how})"


def forget() -> None:
    """Forgets what was loaded or refused, so the next use looks again (tests)."""
    with _lock:
        _found.clear()
        _jax_platforms.clear()
