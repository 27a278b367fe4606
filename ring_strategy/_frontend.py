"""The door to the engine under its former name: this module *is*
:mod:`ring_strategy._core.engine` (one module object under two names), so
importers, and tests that replace its functions, keep working. New code
imports the core."""

import sys

from ring_strategy._core import engine

sys.modules[__name__] = engine
