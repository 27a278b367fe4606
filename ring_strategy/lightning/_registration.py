"""Registers ``"ring"`` in Lightning's strategy registries (the Trainer's and Fabric's), without importing Lightning.

(Plain classes rather than ``importlib.abc`` ones: that module alone costs
more to import than the rest of ``import ring_strategy``.)

Lightning has no entry point for strategies, so ``import ring_strategy`` does
it. Importing ``pytorch_lightning`` takes seconds and ``ringrun`` imports
``ring_strategy`` too, so nothing is imported here: a registry that exists
already (its module is in ``sys.modules``) is filled at once, and for one
that does not, a finder on ``sys.meta_path`` waits for the module that defines
it (``pytorch_lightning.strategies``, ``lightning.pytorch.strategies``, and
Fabric's ``lightning_fabric.strategies``, ``lightning.fabric.strategies``) and
fills it right after that module has run. The import order of
``ring_strategy`` and Lightning therefore does not matter.

The registry gets a small factory rather than the class, so that
registering does not import the strategy (which imports Lightning, which is
at that moment half imported). Any failure here becomes a warning: it must
never break the import of Lightning.
"""

from __future__ import annotations

import sys
import warnings
from types import ModuleType
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

__all__ = ["install"]

NAME = "ring"
DESCRIPTION = "Data-parallel training on the ring allreduce engine ({})"

# Module that defines a strategy registry -> (the registry's name there, the
# module and class of the strategy it gets).
_TARGETS: Dict[str, Tuple[str, str, str]] = {
    "pytorch_lightning.strategies": ("StrategyRegistry", "ring_strategy.lightning.strategy", "RingStrategy"),
    "lightning.pytorch.strategies": ("StrategyRegistry", "ring_strategy.lightning.lightning_pytorch", "RingStrategy"),
    "lightning_fabric.strategies": ("STRATEGY_REGISTRY", "ring_strategy.lightning.fabric", "RingFabricStrategy"),
    "lightning.fabric.strategies": ("STRATEGY_REGISTRY", "ring_strategy.lightning.lightning_fabric",
                                    "RingFabricStrategy"),
}


def _factory(strategy_module: str, class_name: str) -> Callable[..., Any]:
    def ring(**kwargs: Any) -> Any:
        import importlib

        return getattr(importlib.import_module(strategy_module), class_name)(**kwargs)

    ring.__qualname__ = ring.__name__ = class_name
    ring.__doc__ = f"Builds {strategy_module}.{class_name}(**kwargs)."
    return ring


def _register(module: ModuleType) -> None:
    try:
        registry_name, strategy_module, class_name = _TARGETS[module.__name__]
        registry = getattr(module, registry_name, None)
        if registry is None or NAME in registry:
            return
        registry.register(NAME, _factory(strategy_module, class_name),
                          description=DESCRIPTION.format(f"{strategy_module}.{class_name}"))
    except Exception as e:  # noqa: BLE001 - never break Lightning's import
        warnings.warn(f"ring_strategy could not register strategy 'ring' in {module.__name__}: {e!r}", stacklevel=2)


class _RegisteringLoader:
    """Runs the real loader, then registers."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Optional[ModuleType]:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # Later imports of the module (a reload) see the real loader.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        _register(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, get_filename, ...
        return getattr(self._loader, name)


class _Finder:
    """Finds nothing itself; wraps the loader of the registry modules."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Any:
        if fullname not in _TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _RegisteringLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Registers now where Lightning is imported, and on import where it is not yet."""
    for name in _TARGETS:
        module = sys.modules.get(name)
        if module is not None:
            _register(module)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
