"""Ray integration: the ranks of a ring job as Ray actors.

``from ring_strategy.ray import RayExecutor`` works without Ray installed;
Ray is imported when an executor starts. See :class:`RayExecutor`.
"""

from ring_strategy.ray.executor import RayExecutor

__all__ = ["RayExecutor"]
