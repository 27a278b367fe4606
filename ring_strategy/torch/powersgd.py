"""PowerSGD: low-rank gradient compression with error feedback, through the engine's allreduce.

``DistributedOptimizer(opt, compression=hvd.PowerSGD(rank=2))`` and
``RingStrategy(compression=hvd.PowerSGD(...))`` average each gradient
matrix ``M`` (a parameter's gradient viewed as ``shape[0] x rest``) as in
Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient
Compression for Distributed Optimization" (NeurIPS 2019), and as torch's
DDP ``powerSGD_hook`` does, one power iteration a step with a warm start:

1. ``M += e``: this rank's error from the step before (error feedback).
2. ``P = M Q`` (``n x r``) with the ``Q`` of the step before; allreduce P
   (Average), submitted as soon as the gradient is due, so it overlaps the
   rest of the backward pass.
3. Orthogonalize P's columns (Gram-Schmidt); ``Q = M^T P`` (``m x r``);
   allreduce Q (Average): one grouped allreduce of every matrix's Q, after
   the backward pass.
4. The gradient becomes ``P Q^T`` on every rank (the same bits everywhere:
   every rank orthogonalizes the same averaged P); ``e = M - P Q^T``.

Instead of ``n * m`` elements a matrix sends ``(n + m) * r``. A tensor stays
uncompressed (averaged whole, in one grouped allreduce) when it has one
dimension, fewer than ``min_size`` elements, or ``(n + m) * r >= n * m``;
every tensor does during the first ``warmup_steps`` optimizer steps. The
first Q of a matrix is random from a seed every rank shares (``seed`` and
the parameter's name), orthogonalized.

A step is counted when the reductions of one optimizer step are finished
(the owner's ``synchronize``), so every rank counts the same steps.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ring_strategy.torch.functions import broadcast_object
from ring_strategy.torch.mpi_ops import Average, global_process_set, grouped_allreduce_async_, synchronize

__all__ = ["PowerSGD", "PowerSGDReducer"]

_EPS = 1e-8  # added to a column's norm: a zero gradient's P stays zero instead of NaN


@dataclass(frozen=True)
class PowerSGD:
    """Low-rank gradient compression with error feedback (see the module docstring).

    Pass it as the ``compression`` of ``hvd.DistributedOptimizer`` or of
    ``RingStrategy``.

    Args:
        rank: Columns of P and Q: the rank of each gradient's approximation.
        warmup_steps: Optimizer steps averaged uncompressed first (the
            paper's and torch's warm-up: the early gradients change fast).
        min_size: Tensors with fewer elements stay uncompressed (1-D
            tensors, biases and norms' weights, always do).
        seed: Seeds every matrix's first Q (the same on every rank).

    Example:
        >>> import ring_strategy.torch as hvd
        >>> compression = hvd.PowerSGD(rank=2, warmup_steps=10)
    """

    rank: int = 1
    warmup_steps: int = 10
    min_size: int = 1024
    seed: int = 0

    def __post_init__(self) -> None:
        for name, low in (("rank", 1), ("warmup_steps", 0), ("min_size", 0), ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"PowerSGD: {name} should be an integer >= {low}. Got: {value!r}")

    def make_reducer(self, process_set: Any = global_process_set) -> "PowerSGDReducer":
        """The reducer a ``GradientSync`` submits every gradient to."""
        return PowerSGDReducer(self, process_set)


def orthogonalize(matrix: torch.Tensor) -> None:
    """Gram-Schmidt on ``matrix``'s columns, in place (torch's ``powerSGD_hook`` way)."""
    for i in range(matrix.shape[1]):
        col = matrix[:, i:i + 1]
        col /= torch.linalg.vector_norm(col) + _EPS
        if i + 1 < matrix.shape[1]:
            rest = matrix[:, i + 1:]
            rest -= (col * rest).sum(dim=0) * col


class _Matrix:
    """One compressed gradient of this step: its parameter, ``M`` and ``P``."""

    def __init__(self, p: torch.Tensor, name: str, m: torch.Tensor, q: torch.Tensor) -> None:
        self.p, self.name, self.m, self.q = p, name, m, q
        self.p_matrix = m @ q


class PowerSGDReducer:
    """Takes the place of a ``GradientSync``'s gradient reducer (``one`` and
    ``group`` submit, each returning a finisher).

    Attributes:
        steps: Optimizer steps whose reductions finished.
        sent_bytes: Bytes allreduced in the last finished step (P, Q and the
            uncompressed tensors; the ring sends ``2 (size - 1) / size`` of
            that per rank).
        dense_bytes: Bytes the same gradients take uncompressed.
    """

    def __init__(self, config: PowerSGD, process_set: Any = global_process_set) -> None:
        self.config = config
        self.process_set = process_set
        self.steps = 0
        self.sent_bytes = 0
        self.dense_bytes = 0
        self._round: Optional[Dict[str, int]] = None  # the step being reduced: its byte counts
        self._pending: List[Tuple[List[_Matrix], int]] = []
        # By the parameter's reduction name (every rank's, stable): the error (e) and the warm-started Q.
        self._errors: Dict[str, torch.Tensor] = {}
        self._qs: Dict[str, torch.Tensor] = {}

    def sync(self, root_rank: int = 0, name: str = "powersgd.sync") -> None:
        """Gives every rank ``root_rank``'s step count and Qs (a collective).

        What a worker that joins a running elastic job needs: counting its
        steps from 0 it would still be warming up (averaging whole gradients)
        while the others send P and Q. Each rank keeps its own error (a
        joined worker starts with none).
        """
        steps, qs = broadcast_object((self.steps, {k: q.cpu() for k, q in self._qs.items()}), root_rank, name,
                                     process_set=self.process_set)
        self.steps, self._qs = steps, qs  # moved to each gradient's device when next used

    # ------------------------------------------------------------ what is compressed
    def compresses(self, p: torch.Tensor) -> bool:
        """Whether ``p``'s gradient goes as P and Q this step (see the module docstring)."""
        if self.steps < self.config.warmup_steps or p.dim() < 2 or p.numel() < self.config.min_size:
            return False
        n = p.shape[0]
        m = p.numel() // n
        return (n + m) * min(self.config.rank, n, m) < n * m

    def _first_q(self, p: torch.Tensor, name: str, m: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.config.seed * 1_000_003 + zlib.crc32(name.encode()))
        q = torch.randn(m, min(self.config.rank, p.shape[0], m), generator=generator, dtype=torch.float32)
        q = q.to(dtype=p.dtype, device=p.device)
        orthogonalize(q)
        return q

    # ------------------------------------------------------------ submitting
    def one(self, p: torch.Tensor, name: str) -> Callable[[], None]:
        return self.group((p,), [name])

    def group(self, params: Sequence[torch.Tensor], names: Sequence[str]) -> Callable[[], None]:
        """Submits the allreduce of the uncompressed gradients and of the P of
        the compressed ones; the finisher completes the whole step."""
        if self._round is None:
            self._round = {"sent": 0, "dense": 0}
        grads = [_dense_grad(p) for p in params]
        self._round["dense"] += sum(g.numel() * g.element_size() for g in grads)
        plain = [g for p, g in zip(params, grads) if not self.compresses(p)]
        low = [(p, n, g) for p, n, g in zip(params, names, grads) if self.compresses(p)]
        handle = None
        if plain:
            handle = grouped_allreduce_async_(plain, name=f"powersgd.plain.{names[0]}", op=Average,
                                              process_set=self.process_set)
            self._round["sent"] += sum(g.numel() * g.element_size() for g in plain)
        if low:
            matrices = [self._matrix(p, n, g) for p, n, g in low]
            ps = [mat.p_matrix for mat in matrices]
            self._round["sent"] += sum(t.numel() * t.element_size() for t in ps)
            self._pending.append((matrices, grouped_allreduce_async_(
                ps, name=f"powersgd.P.{low[0][1]}", op=Average, process_set=self.process_set)))

        def finish() -> None:
            if handle is not None:
                synchronize(handle)
            self._finish_step()

        return finish

    def _matrix(self, p: torch.Tensor, name: str, grad: torch.Tensor) -> _Matrix:
        """``M = grad + e`` as a matrix (in ``grad``'s memory), with this step's P."""
        m = grad.view(grad.shape[0], -1)
        error = self._errors.get(name)
        if error is not None:
            m.add_(error)
        q = self._qs.get(name)
        q = self._first_q(p, name, m.shape[1]) if q is None else q.to(device=m.device, dtype=m.dtype)
        return _Matrix(p, name, m, q)

    # ------------------------------------------------------------ finishing
    def _finish_step(self) -> None:
        """Runs once per step (later calls find nothing to do): P's
        orthogonalization, the grouped allreduce of every Q, the decompression."""
        if self._round is None:
            return
        matrices: List[_Matrix] = []
        for group, handle in self._pending:
            synchronize(handle)
            matrices.extend(group)
        self._pending = []
        matrices.sort(key=lambda mat: mat.name)  # hooks fire in any order; the Q group must match across ranks
        for mat in matrices:
            orthogonalize(mat.p_matrix)
            mat.q = mat.m.t() @ mat.p_matrix
        if matrices:
            qs = [mat.q for mat in matrices]
            self._round["sent"] += sum(q.numel() * q.element_size() for q in qs)
            synchronize(grouped_allreduce_async_(qs, name="powersgd.Q", op=Average, process_set=self.process_set))
        for mat in matrices:
            approximation = mat.p_matrix @ mat.q.t()
            self._errors[mat.name] = mat.m - approximation
            self._qs[mat.name] = mat.q
            mat.m.copy_(approximation)  # M lives in the gradient's memory
        self.sent_bytes, self.dense_bytes = self._round["sent"], self._round["dense"]
        self._round = None
        self.steps += 1


def _dense_grad(p: torch.Tensor) -> torch.Tensor:
    """``p.grad``, dense and contiguous; zeros where None (other ranks may have
    one: every rank takes part)."""
    if p.grad is None:
        p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
    if p.grad.is_sparse:
        p.grad = p.grad.to_dense()  # reduced dense, as with sparse_as_dense=True
    if not p.grad.is_contiguous():
        p.grad = p.grad.contiguous()
    return p.grad
