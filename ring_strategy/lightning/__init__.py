"""PyTorch Lightning support: ``Trainer(strategy="ring")`` and ``Fabric(strategy="ring")``.

``import ring_strategy`` registers the name ``"ring"`` with
``pytorch_lightning`` (and with ``lightning.pytorch`` when that package is
installed), so the one line a training script adds is that import::

    import ring_strategy  # noqa: F401  (registers strategy="ring")
    import pytorch_lightning as pl

    trainer = pl.Trainer(strategy="ring", accelerator="cpu", devices=2)
    trainer.fit(model)

``python train.py`` then starts the second worker itself; under
``ringrun -np 2 python train.py`` the launcher's workers are used.
``RingStrategy(...)`` instances work too. Fabric takes the same name:
``Fabric(strategy="ring", accelerator="cpu", devices=2)`` and ``fabric.launch()``
(``RingFabricStrategy``). This package imports Lightning only
when one of its names is used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RingEnvironment", "RingFabricStrategy", "RingStrategy", "RingSyncBatchNorm"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        import importlib

        # Fabric's strategy and the environment need lightning_fabric only.
        home = "fabric" if name in ("RingEnvironment", "RingFabricStrategy") else "strategy"
        value = getattr(importlib.import_module(f"ring_strategy.lightning.{home}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ring_strategy.lightning' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
