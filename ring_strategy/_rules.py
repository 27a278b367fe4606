"""The argument rules under their former module name; they live in
:mod:`ring_strategy._core.rules` (importers keep working)."""

from ring_strategy._core.rules import (  # noqa: F401  (re-exported)
    _ENGINE_OPS,
    ADASUM_SPARSE_ERROR,
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
    group_names,
    handle_average_backwards_compatibility,
    predivide_scales,
    reducescatter_rows,
    require_rows,
)
