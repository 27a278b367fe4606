"""Process sets for the torch front end (shared with every front end)."""

from ring_strategy.process_sets import (  # noqa: F401  (re-exported)
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
