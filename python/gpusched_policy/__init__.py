"""gpusched's policy service and simulation environment in Python.

- env.SimEnv: the simulator as a Gymnasium-style environment
  ("gpusched simulate env" as a subprocess).
- vector.SimVecEnv: several SimEnv episodes stepped at once, observations
  stacked.
- server.serve: a PolicyService that the scheduler asks to score nodes.
- model.Model: a model in gpusched's model format (gpusched.io/model/v1),
  which the scheduler also evaluates itself (external.model); usable in
  both.
- scorer.LinearScorer: a linear scorer over the feature columns, weights by
  column name (the cross-entropy example's).
"""

from .model import Model  # noqa: F401
from .scorer import LinearScorer  # noqa: F401
