"""gpusched's policy service and simulation environment in Python.

- env.SimEnv: the simulator as a Gymnasium-style environment
  ("gpusched simulate env" as a subprocess).
- server.serve: a PolicyService that the scheduler asks to score nodes.
- scorer.LinearScorer: a linear scorer over the feature columns, usable in
  both.
"""

from .scorer import LinearScorer  # noqa: F401
