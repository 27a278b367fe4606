"""The argument rules under their former module name; they live in
:mod:`ring_strategy._core.rules` (importers keep working), except
``group_names``, which names operations and lives with the automatic names
in :mod:`ring_strategy._core.handles`."""

from ring_strategy._core.handles import group_names  # noqa: F401  (re-exported)
from ring_strategy._core.rules import (  # noqa: F401  (re-exported)
    ADASUM_SPARSE_ERROR,
    ENGINE_OPS,
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    alltoall_splits,
    check_op,
    check_root,
    check_sparse_op,
    handle_average_backwards_compatibility,
    predivide_scales,
    reducescatter_rows,
    require_rows,
)
