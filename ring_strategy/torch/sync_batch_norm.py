"""SyncBatchNorm: batch normalization over the global batch of all ranks (CPU or CUDA tensors).

In training, the per-channel mean and variance come from every rank's batch
together, so a model trained on N ranks with batch B each normalizes exactly
like one trained on a single batch of N*B. Ranks may hold batches of different
sizes (an uneven last batch). Outside training (with running statistics) it
is an ordinary batch norm.

:meth:`SyncBatchNorm.convert_sync_batchnorm` swaps a model's ``BatchNorm*d``
layers for SyncBatchNorm (as ``torch.nn.SyncBatchNorm``'s does) and
:func:`revert_sync_batchnorm` swaps them back; the Lightning strategy's
``sync_batchnorm=True`` is these two.
"""

from __future__ import annotations

import itertools
from typing import Any, Optional, Tuple

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.nn.modules.batchnorm import _BatchNorm

from ring_strategy._batch_stats import global_moments
from ring_strategy._core.rules import Sum
from ring_strategy.process_sets import place_of, global_process_set
from ring_strategy.torch._async_ops import allreduce_

__all__ = ["SyncBatchNorm", "revert_sync_batchnorm"]

# Layers are numbered in construction order, which is the same on every rank
# when every rank builds the same model; the number names the layer's
# reductions so that they repeat step after step (response cache hits).
_layer_ids = itertools.count()


def _set_size(process_set: Any) -> int:
    """Ranks in ``process_set``, after checking it as every collective does."""
    return place_of(process_set).size


class _SyncBatchNormFunction(torch.autograd.Function):
    """Normalization with global statistics; backward reduces the two
    per-channel sums its formula needs across ranks.

    With xhat = (x - mean) * invstd over the global batch of N rows per
    channel and dy the gradient of the output:
        dx = weight * invstd * (dy - sum(dy) / N - xhat * sum(dy * xhat) / N)
    where the sums run over the global batch; the weight and bias gradients
    are this rank's local sums (the optimizer averages them over ranks).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                running_mean: Optional[torch.Tensor], running_var: Optional[torch.Tensor], eps: float,
                momentum: float, name: str, process_set: Any) -> torch.Tensor:
        channels = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        shape = [1, channels] + [1] * (x.dim() - 2)
        # Sums in float64: var = E[x^2] - E[x]^2 loses digits in float32.
        x64 = x.detach().to(torch.float64)
        local_count = x.numel() // channels if channels else 0
        stats = torch.cat([
            x64.sum(dims), (x64 * x64).sum(dims), torch.tensor([float(local_count)], dtype=torch.float64, device=x.device),
        ])
        allreduce_(stats, name=f"{name}.stats", op=Sum, process_set=process_set)
        mean64, var64, counted = global_moments(stats, channels)
        count = counted.item()
        if count <= 1:
            raise ValueError(
                f"SyncBatchNorm: expected more than 1 value per channel when training, got {int(count)} "
                "over all ranks"
            )
        var64 = var64.clamp(min=0.0)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean64.to(running_mean.dtype), alpha=momentum)
                unbiased = var64 * (count / (count - 1))
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        mean = mean64.to(x.dtype)
        invstd = torch.rsqrt(var64 + eps).to(x.dtype)
        xhat = (x - mean.view(shape)) * invstd.view(shape)
        y = xhat
        if weight is not None:
            y = y * weight.view(shape)
        if bias is not None:
            y = y + bias.view(shape)
        ctx.save_for_backward(xhat, weight, invstd)
        ctx.count = count
        ctx.name = name
        ctx.process_set = process_set
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, dy: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        xhat, weight, invstd = ctx.saved_tensors
        channels = xhat.shape[1]
        dims = [0] + list(range(2, xhat.dim()))
        shape = [1, channels] + [1] * (xhat.dim() - 2)
        dy = dy.contiguous()
        local_sum_dy = dy.sum(dims)
        local_sum_dy_xhat = (dy * xhat).sum(dims)
        sums = torch.cat([local_sum_dy, local_sum_dy_xhat]).to(torch.float64)
        allreduce_(sums, name=f"{ctx.name}.grads", op=Sum, process_set=ctx.process_set)
        mean_dy = (sums[:channels] / ctx.count).to(dy.dtype)
        mean_dy_xhat = (sums[channels:] / ctx.count).to(dy.dtype)
        dx = None
        if ctx.needs_input_grad[0]:
            scale = invstd if weight is None else invstd * weight
            dx = (dy - mean_dy.view(shape) - xhat * mean_dy_xhat.view(shape)) * scale.view(shape)
        dweight = local_sum_dy_xhat if weight is not None and ctx.needs_input_grad[1] else None
        dbias = local_sum_dy if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dweight, dbias, None, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Batch normalization whose training statistics span every rank's batch.

    A drop-in replacement for ``torch.nn.BatchNorm1d/2d/3d`` on CPU or CUDA tensors of
    shape (N, C, ...) with at least two dimensions. In training the mean and
    (biased) variance per channel are computed over the concatenation of all
    ranks' batches, which may differ in size, and the backward pass yields the
    gradients batch norm would give on that concatenated batch. Running
    statistics are updated with the global values (unbiased variance), so
    they stay identical on every rank. In eval mode with running statistics
    it normalizes locally with them, like ``BatchNorm``.

    Every rank must call the layer the same number of times in the same order
    (each call reduces across ranks in forward and in backward).

    Args:
        num_features: number of channels C.
        eps: added to the variance for numerical stability. Default 1e-5.
        momentum: weight of the new statistics in the running averages;
            None for a cumulative average. Default 0.1.
        affine: learnable per-channel weight and bias. Default True.
        track_running_stats: keep running mean and variance. Default True.
        process_set: the ranks whose batches are normalized together.

    Example::

        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), hvd.SyncBatchNorm(8), torch.nn.ReLU())
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_set: Any = global_process_set,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype)
        self.process_set = process_set
        self._ring_name = f"SyncBatchNorm.{next(_layer_ids)}"

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        if input.shape[1] != self.num_features:
            raise ValueError(f"SyncBatchNorm: expected {self.num_features} channels, got {input.shape[1]}")
        if input.device.type not in ("cpu", "cuda"):
            raise ValueError(f"SyncBatchNorm runs on CPU and CUDA tensors. Got a tensor on {input.device}")

        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / float(self.num_batches_tracked)

        use_batch_stats = self.training or not self.track_running_stats
        if not use_batch_stats:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                                False, 0.0, self.eps)
        update = self.training and self.track_running_stats
        if _set_size(self.process_set) == 1:
            return F.batch_norm(
                input, self.running_mean if update else None, self.running_var if update else None,
                self.weight, self.bias, True, momentum, self.eps,
            )
        return _SyncBatchNormFunction.apply(
            input, self.weight, self.bias, self.running_mean if update else None,
            self.running_var if update else None, self.eps, momentum, self._ring_name, self.process_set,
        )

    @classmethod
    def convert_sync_batchnorm(cls, module: torch.nn.Module, process_set: Any = global_process_set) -> torch.nn.Module:
        """Replaces every batch-norm layer of ``module`` by a SyncBatchNorm.

        The new layers take over the old ones' parameters and buffers (the
        same tensor objects, so optimizers built before stay valid), their
        train/eval mode and ``requires_grad``; each remembers the class it
        replaced for :func:`revert_sync_batchnorm`. ``torch.nn.SyncBatchNorm``
        layers are converted too; ring's own are left as they are.

        Args:
            module: The model, or one batch-norm layer.
            process_set: The ranks whose batches the new layers normalize together.

        Returns:
            ``module`` with its children replaced, or the new layer when
            ``module`` itself is a batch-norm layer.
        """
        converted = module
        if isinstance(module, _BatchNorm) and not isinstance(module, cls):
            converted = cls(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_set=process_set)
            _take_state(converted, module)
            converted._ring_replaced = type(module)
        for name, child in module.named_children():
            new_child = cls.convert_sync_batchnorm(child, process_set)
            if new_child is not child:
                converted.add_module(name, new_child)
        return converted


def _take_state(target: _BatchNorm, source: _BatchNorm) -> None:
    """Moves ``source``'s parameters, buffers, mode and qconfig onto ``target``."""
    if source.affine:
        target.weight = source.weight
        target.bias = source.bias
    target.running_mean = source.running_mean
    target.running_var = source.running_var
    target.num_batches_tracked = source.num_batches_tracked
    target.train(source.training)
    if hasattr(source, "qconfig"):
        target.qconfig = source.qconfig


class _BatchNormXd(_BatchNorm):
    """A batch norm of any rank (what a SyncBatchNorm built directly reverts to)."""

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")


def revert_sync_batchnorm(module: torch.nn.Module) -> torch.nn.Module:
    """Undoes :meth:`SyncBatchNorm.convert_sync_batchnorm`.

    Each SyncBatchNorm becomes the class it replaced (``torch.nn.BatchNorm2d``,
    ...), or a batch norm that accepts any rank when it was built directly,
    with the same parameters, buffers and mode.

    Args:
        module: The model, or one layer.

    Returns:
        ``module`` with its children replaced, or the new layer when
        ``module`` itself is a SyncBatchNorm.
    """
    converted = module
    if isinstance(module, SyncBatchNorm):
        kind = getattr(module, "_ring_replaced", _BatchNormXd)
        converted = kind(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats)
        _take_state(converted, module)
    for name, child in module.named_children():
        new_child = revert_sync_batchnorm(child)
        if new_child is not child:
            converted.add_module(name, new_child)
    return converted
