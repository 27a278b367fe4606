"""The gradient schedule rule (ring_strategy/_schedule.py): what ``auto``
picks from the CPUs per rank, what RING_GRADIENT_SCHEDULE forces, and the
error for anything else."""

from __future__ import annotations

import os

import pytest

from ring_strategy._schedule import AFTER_BACKWARD, OVERLAP, VARIABLE, cpus_per_rank, gradient_schedule


def test_auto_overlaps_only_with_a_spare_cpu_per_rank() -> None:
    cpus = len(os.sched_getaffinity(0))
    assert cpus_per_rank(1) == cpus and cpus_per_rank(cpus) == 1.0
    assert gradient_schedule("auto", local_size=cpus, environ={}) == AFTER_BACKWARD  # one CPU per rank
    assert gradient_schedule(None, local_size=cpus, environ={}) == AFTER_BACKWARD
    if cpus >= 2:
        assert gradient_schedule("auto", local_size=cpus // 2, environ={}) == OVERLAP


@pytest.mark.parametrize("text, schedule", [("overlap", OVERLAP), ("AFTER_BACKWARD", AFTER_BACKWARD),
                                            (" auto ", None)])
def test_the_variable_forces_a_schedule(text: str, schedule: str) -> None:
    got = gradient_schedule(None, local_size=10 ** 6, environ={VARIABLE: text})
    assert got == (schedule or AFTER_BACKWARD)  # auto with a million ranks per host: no spare CPU


def test_anything_else_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="RING_GRADIENT_SCHEDULE should be auto, overlap or after_backward. "
                                         "Got: 'sometimes'"):
        gradient_schedule(None, environ={VARIABLE: "sometimes"})
    with pytest.raises(ValueError, match="gradient_schedule should be auto, overlap or after_backward"):
        gradient_schedule("eager")
