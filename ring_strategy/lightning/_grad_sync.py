"""Gradient averaging for a module, overlapped with its backward pass.

A post-accumulate-grad hook on every trainable parameter starts an in-place
asynchronous allreduce (Average) of its gradient as soon as autograd has
finished accumulating it, so the last layers communicate while the first ones
still compute. :meth:`GradientSync.wait` (called right after ``backward``,
before clipping or the optimizer step) completes them all.

While :attr:`GradientSync.enabled` is false (gradient accumulation on a
micro-batch that is not the last) the hooks do nothing and gradients simply
accumulate locally; the next synchronised backward reduces the sum.

A parameter whose gradient this rank did not compute, but that requires grad,
is reduced as zeros (its ``.grad`` becomes a zero tensor), so a rank that took
another branch of the model does not leave its peers waiting. Names come from
``named_parameters()``, which is the same on every rank, so the engine matches
them regardless of the order in which hooks fire.
"""

from __future__ import annotations

from typing import Dict, List

import torch

from ring_strategy.torch.mpi_ops import Average, allreduce_async_, synchronize

__all__ = ["GradientSync"]


class GradientSync:
    """Hooks that average a module's gradients over all ranks.

    Args:
        module: The module whose parameters are synchronised.
        prefix: Prefix of the engine's tensor names.
    """

    def __init__(self, module: torch.nn.Module, prefix: str = "ring.lightning.grad") -> None:
        self.enabled = True
        self._module = module
        self._prefix = prefix
        self._names: Dict[torch.nn.Parameter, str] = {}
        self._hooks: Dict[torch.nn.Parameter, object] = {}
        self._handles: Dict[torch.nn.Parameter, int] = {}
        self.refresh()

    def refresh(self) -> None:
        """Hooks every parameter that requires grad and has no hook yet (say, one unfrozen since)."""
        for name, p in self._module.named_parameters():
            if p not in self._names:
                self._names[p] = f"{self._prefix}.{name}"
            if p.requires_grad and p not in self._hooks:
                self._hooks[p] = p.register_post_accumulate_grad_hook(self._on_grad)

    def _on_grad(self, p: torch.Tensor) -> None:
        if not self.enabled or p.grad is None:
            return
        pending = self._handles.pop(p, None)
        if pending is not None:  # a second backward through the same graph
            synchronize(pending)
        self._handles[p] = allreduce_async_(p.grad, name=self._names[p], op=Average)

    def wait(self) -> None:
        """Reduces what the hooks missed and waits for every reduction of this backward."""
        if not self.enabled:
            return
        for p in self._hooks:
            if p.requires_grad and p not in self._handles:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                self._handles[p] = allreduce_async_(p.grad, name=self._names[p], op=Average)
        handles, self._handles = list(self._handles.values()), {}
        error = None
        for h in handles:  # wait for every one, even after an error
            try:
                synchronize(h)
            except Exception as e:  # noqa: BLE001 - re-raised below
                error = error or e
        if error is not None:
            raise error

    def remove(self) -> None:
        """Removes the hooks (after waiting for anything still in flight)."""
        handles: List[int] = list(self._handles.values())
        self._handles = {}
        for h in handles:
            try:
                synchronize(h)
            except Exception:  # noqa: BLE001 - the job is being torn down
                pass
        for hook in self._hooks.values():
            hook.remove()  # type: ignore[attr-defined]
        self._hooks = {}
