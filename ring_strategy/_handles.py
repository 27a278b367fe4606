"""The handle layer under its former module name: it lives in
:mod:`ring_strategy._core.handles` (operations, integer handles, automatic
names), with waiting in :mod:`ring_strategy._core.engine`. Importers keep
working; new code imports the core."""

from ring_strategy._core.handles import (  # noqa: F401  (re-exported)
    Finish,
    Operation,
    abandon,
    auto_name,
    auto_names,
    find,
    group_names,
    outputs_given,
    poll,
    register,
    synchronize,
    take,
)
