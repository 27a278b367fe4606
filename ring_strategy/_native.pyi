"""Typed stub of the native engine module (native/bindings/module.cc)."""

from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import numpy as np

__version__: str

class RingError(RuntimeError): ...
class BadArgumentError(RingError, ValueError): ...
class MismatchError(RingError): ...
class HorovodInternalError(RingError): ...
class PeerFailureError(HorovodInternalError): ...
class RingTimeoutError(HorovodInternalError, TimeoutError): ...
class ShutdownError(RingError): ...

OP_ALLREDUCE: int
OP_ALLGATHER: int
OP_BROADCAST: int
OP_ALLTOALL: int
OP_REDUCESCATTER: int
OP_BARRIER: int
OP_JOIN: int
NUM_OP_TYPES: int
NUM_ERROR_KINDS: int
TIMELINE_DYNAMIC: str
DTYPES: dict[str, int]
REDUCE_OPS: dict[str, int]

def parse(kind: str, data: bytes) -> None:
    """Runs the engine's parser ``kind`` ('request_list', 'response_list',
    'handshake', 'endpoint') on ``data``; raises a RingError subclass when
    the input is malformed (for fuzz tests)."""

def config_table() -> list[tuple[str, str, str, str]]:
    """(name, HOROVOD_ alias, default, doc) for every configuration variable."""

def parse_config(environ: Mapping[str, str]) -> dict:
    """The configuration init() would read from ``environ``, as ``Runtime.config``
    gives it; raises BadArgumentError naming the variable as init() would."""

def reducescatter_rows(rows: int, size: int, rank: int) -> int:
    """Rows of a first dimension of ``rows`` that rank ``rank`` of ``size``
    receives from a reducescatter: ``rows // size``, plus one when
    ``rank < rows % size`` (the engine's rule, native/collectives/slices.h).
    Raises BadArgumentError unless rows >= 0 and 0 <= rank < size."""

def cpus_per_rank(local_size: int) -> float: ...
def allreduce_algorithm(mode: str, size: int, one_host: bool, batch: int) -> str:
    """The flat allreduce the engine runs for a batch (its timeline phase
    name), by the engine's rule (native/collectives/allreduce_choice.h)."""
    ...
def gpu_info(nccl_wheel_paths: Sequence[str]) -> Dict[str, Any]: ...

MIN_NCCL_VERSION: int
def engine_api_address() -> int:
    """The address of the engine's C interface (native/frameworks/engine_api.h),
    handed to framework operation libraries built outside this module."""
def engine_api_version() -> int: ...
def answer_signals(fn: Callable[[], Any]) -> Any:
    """fn(), during which a framework kernel that waits on this thread runs
    Python's signal handlers; an exception a handler raised is raised from
    here (native/bindings/signals.cc)."""

HAS_XLA_FFI: bool
def xla_ffi_handlers(platform: str = "cpu") -> Dict[str, Any]:
    """XLA FFI handlers (target name -> PyCapsule) for
    jax.ffi.register_ffi_target on ``platform``: 'cpu' or 'CUDA'. Only when
    HAS_XLA_FFI (built against jaxlib's headers)."""
def xla_stream_call(op: int, names: str, args: Sequence[Tuple[int, int, int, Sequence[int]]],
                    rets: Sequence[Tuple[int, int, int, Sequence[int]]], reduce_op: int = 0, prescale: float = 1.0,
                    postscale: float = 1.0, root: int = 0, process_set: int = 0, device: int = 0,
                    stream: int = 0) -> str:
    """What the CUDA XLA FFI handler does (native/frameworks/xla/collective_call.h),
    on GPU memory given as (address, bytes, dtype code, dims); blocks as the
    handler does and returns '' or '<ErrorClass>: message'. For tests on the
    CUDA stand-ins and device checks."""
def shm_segment_names(job_id: str, rank: int) -> list[str]:
    """Every POSIX shared-memory name (as given to shm_open, with its leading
    '/') that rank ``rank`` of job ``job_id`` may create, data mesh first
    (native/engine/mesh_names.h). Raises BadArgumentError for a job id that
    cannot name shared memory or a negative rank."""

class Runtime:
    def __init__(
        self,
        rank: int,
        size: int,
        local_rank: int,
        local_size: int,
        cross_rank: int,
        cross_size: int,
        secret: bytes,
        job_id: str,
        host_id: str,
        bind_host: str = "127.0.0.1",
        advertise_host: str = "127.0.0.1",
    ) -> None: ...
    def local_endpoint(self) -> str: ...
    def connect(self, endpoints: Sequence[str]) -> None: ...
    def start(self) -> None: ...
    def cpus_per_rank(self) -> float:
        """The CPUs this rank may count on, from its host's ranks' CPU
        affinities (known after connect())."""
    def enqueue(
        self,
        op: int,
        name: str,
        input: Any,
        output: Optional[Any],
        dtype: int,
        reduce_op: int,
        root: int,
        prescale: float,
        postscale: float,
        shape: Sequence[int],
        splits: Sequence[int],
        wake: bool = True,
        device: str = "",
        process_set: int = 0,
        stream: int = 0,
    ) -> int:
        """Queues one operation; returns its handle. ``input`` and ``output``
        are DLPack arrays (or capsules) in host memory or on a CUDA GPU, both
        on one device, or host memory described as (address, nbytes, shape); ``device`` ("" or e.g. "cuda:1") must name it when
        given. A device no backend serves raises BadArgumentError ("no
        backend for device ...", and why). ``stream``: for GPU tensors, the
        CUstream (an integer) the input was produced on; the engine reads the
        input only after the work queued on it so far (0: the legacy default
        stream). ``process_set``
        is the id of a set this rank belongs to (0: every rank); a broadcast's
        root is a global rank of that set."""
    def enqueue_reduce(
        self,
        op: int,
        name: str,
        input: Any,
        output: Optional[Any],
        dtype: int,
        reduce_op: int,
        prescale: float,
        postscale: float,
        process_set: int,
        wake: bool,
    ) -> int:
        """:meth:`enqueue` with the input's shape, no splits and no stream
        (fewer arguments to convert)."""
    def enqueue_group(
        self,
        op: int,
        names: Sequence[str],
        inputs: list[Any],
        outputs: Optional[list[Optional[Any]]],
        dtypes: Sequence[int],
        shapes: Optional[Sequence[Sequence[int]]] = None,
        reduce_op: int = 0,
        root: int = 0,
        prescale: float = 1.0,
        postscale: float = 1.0,
        wake: bool = True,
        process_set: int = 0,
        streams: Sequence[int] = (),
    ) -> list[int]:
        """Queues one operation per name in one call, as ``enqueue`` queues
        one; returns their handles in order. Member ``i`` is ``inputs[i]``
        into ``outputs[i]`` (None: the engine allocates; ``outputs`` None:
        for every member) with ``dtypes[i]`` and ``shapes[i]`` (None: each
        input's own shape) and ``streams[i]`` (empty: 0); the other fields
        are shared. Dtypes may differ. Every member is checked before any is
        queued: a bad one raises (BadArgumentError naming its tensor) and
        nothing is queued. The background thread is woken once."""
    def add_process_set(self, id: int, ranks: Sequence[int]) -> None:
        """Registers set ``id`` (> 0, unused) over ``ranks`` on this rank."""
    def remove_process_set(self, id: int) -> bool:
        """Forgets set ``id``; False when there is none. Refused for id 0 and
        while this rank has operations of the set in flight."""
    def wait_set_idle(self, id: int, timeout: float) -> bool:
        """Waits (GIL released, signal handlers run) until this rank has no
        unfinished operation of process set ``id``; False when ``timeout``
        seconds passed first."""
    def poll(self, handle: int) -> bool: ...
    def wait(self, handle: int, timeout: float = -1.0) -> bool: ...
    def release(self, handle: int) -> tuple[Optional[np.ndarray], list[int], list[int]]:
        """(engine-allocated output bytes or None, output shape, received splits)."""
    def wait_release(self, handle: int, results: bool = True) -> Optional[tuple[Optional[np.ndarray], list[int], list[int]]]:
        """wait_interruptibly(handle) then release(handle) in one call; with
        results=False the result is dropped and None returned (errors are
        still raised)."""
    def wait_release_group(
        self, handles: Sequence[int], results: bool = True
    ) -> Optional[list[tuple[Optional[np.ndarray], list[int], list[int]]]]:
        """wait_release of every handle: waits for all with the GIL released
        once, running Python's signal handlers at least every 100 ms (an
        exception one raises propagates and leaves every handle as it was),
        then releases all and returns their results in order (None with
        results=False), or raises the first failed one's error once every
        handle is released."""
    def wait_interruptibly(self, handle: int) -> None:
        """Blocks until the handle has finished, running Python's signal
        handlers at least every 100 ms; an exception one raises propagates
        and leaves the handle as it was."""
    def shutdown(self) -> None: ...
    def start_timeline(self, path: str, mark_cycles: bool = False) -> None: ...
    def stop_timeline(self) -> None: ...
    def running(self) -> bool: ...
    @property
    def config(self) -> dict: ...
