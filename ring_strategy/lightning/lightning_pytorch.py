"""RingStrategy for the unified ``lightning`` package (``lightning.pytorch``).

``lightning.pytorch`` and ``pytorch_lightning`` ship the same code under two
names, and their classes are distinct: a Trainer of one rejects a strategy
built on the other's base class. Lightning produces the ``lightning`` package
by renaming imports in the sources, and this module does the same with
:mod:`ring_strategy.lightning.strategy`: it compiles that file's source with
``pytorch_lightning`` read as ``lightning.pytorch`` and ``lightning_fabric``
as ``lightning.fabric``. Importing it imports ``lightning``.
"""

from __future__ import annotations

from pathlib import Path

_SOURCE = Path(__file__).with_name("strategy.py")
_RENAMES = (("pytorch_lightning", "lightning.pytorch"), ("lightning_fabric", "lightning.fabric"))


def _compiled() -> object:
    text = _SOURCE.read_text(encoding="utf-8")
    for old, new in _RENAMES:
        text = text.replace(old, new)
    return compile(text, str(_SOURCE), "exec")


exec(_compiled(), globals())  # defines RingEnvironment, RingStrategy, __all__
