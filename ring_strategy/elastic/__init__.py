"""Elastic training: state that survives workers leaving and joining a job.

The framework front ends (``ring_strategy.torch.elastic``, ...) build on this
package: state objects, the ``run`` decorator and ``ElasticSampler`` live
here once; ``_world`` is the seam to the launcher (leaving one world and
joining the next).
"""

from ring_strategy.elastic.loop import run
from ring_strategy.elastic.sampler import ElasticSampler
from ring_strategy.elastic.state import ObjectState, State

__all__ = ["run", "State", "ObjectState", "ElasticSampler"]
