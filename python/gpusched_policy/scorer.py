"""A linear scorer over the policy service's feature columns."""

import json

import numpy as np


class LinearScorer:
    """Scores each node as the dot product of its feature row with weights
    given by column name (columns without a weight count 0)."""

    def __init__(self, weights):
        self.weights = {str(k): float(v) for k, v in dict(weights).items()}
        self._cache = None  # (columns tuple, weight vector)

    @classmethod
    def load(cls, path):
        with open(path) as f:
            data = json.load(f)
        return cls(data["weights"] if "weights" in data else data)

    def save(self, path, **extra):
        with open(path, "w") as f:
            json.dump({"weights": self.weights, **extra}, f, indent=2, sort_keys=True)
            f.write("\n")

    def vector(self, columns):
        key = tuple(columns)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, np.array([self.weights.get(c, 0.0) for c in columns], dtype=np.float32))
        return self._cache[1]

    def scores(self, matrix, columns):
        """One score per row of matrix (rows × columns)."""
        return matrix @ self.vector(columns)

    def act(self, obs):
        """The best-scored node inside the observation's action mask."""
        s = self.scores(obs["nodes"], obs["columns"]).astype(np.float64)
        s[~obs["action_mask"]] = -np.inf
        return int(np.argmax(s))

    def __call__(self, pod, matrix, columns, request=None):
        """The server's score function (server.serve)."""
        return self.scores(matrix, columns)
