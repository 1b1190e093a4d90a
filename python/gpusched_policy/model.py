"""Models in gpusched's model format (gpusched.io/model/v1).

A model is a small feed-forward network over some of the feature columns,
stored as JSON (docs/policy-service.md#models):

    {"format": "gpusched.io/model/v1",
     "columns": ["builtin_score", "free_gpu_after"],
     "layers": [{"weights": [[1.0, 0.004]], "bias": [0.0]}],
     "trained": {...}}

Each layer computes activation(weights · x + bias), with "linear" (the
default) or "relu"; the last layer has one output, the node's score. The
scheduler evaluates the same file itself (GPUPlacement's external.model), and
both evaluate it in float64 with the same operations in the same order, so
they score every node identically: where GPUPlacement is the only scorer,
they choose the same node but among nodes of equal scores, which act() takes
the first of and the scheduler its tie-break's.

Run as a module it scores raw matrices for a cross-check:
    python3 -m gpusched_policy.model MODEL MATRIX COLUMNS
where MATRIX holds rows of the comma-separated COLUMNS as little-endian
float32; it prints one score per row, as repr (exact) floats.
"""

import json
import sys

import numpy as np

FORMAT = "gpusched.io/model/v1"
ACTIVATIONS = ("linear", "relu")


class ModelError(ValueError):
    """A model file that is not a valid model; the message names the field."""


class Model:
    def __init__(self, columns, layers, trained=None):
        self.columns = [str(c) for c in columns]
        self.layers = []
        width = len(self.columns)
        if width == 0:
            raise ModelError("columns: empty; want one or more feature columns")
        if not layers:
            raise ModelError("layers: empty; want one or more, the last with one output")
        for i, layer in enumerate(layers):
            unknown = set(layer) - {"weights", "bias", "activation"}
            if unknown or "weights" not in layer or "bias" not in layer:
                raise ModelError(f"layers[{i}]: fields {sorted(layer)}; want weights, bias and optionally activation")
            if any(isinstance(v, str) for row in layer["weights"] for v in (row if isinstance(row, list) else [row])):
                raise ModelError(f"layers[{i}].weights: a string; want numbers")
            w = np.asarray(layer["weights"], dtype=np.float64)
            b = np.asarray(layer["bias"], dtype=np.float64)
            act = layer.get("activation") or "linear"
            if w.ndim != 2 or w.shape[1] != width:
                raise ModelError(f"layers[{i}].weights: shape {w.shape}; want (outputs, {width})")
            if b.shape != (w.shape[0],):
                raise ModelError(f"layers[{i}].bias: {b.size} values; want {w.shape[0]}, one per output")
            if act not in ACTIVATIONS:
                raise ModelError(f"layers[{i}].activation {act!r}: want one of {', '.join(ACTIVATIONS)}")
            if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
                raise ModelError(f"layers[{i}]: a weight or bias is not finite")
            self.layers.append((w, b, act))
            width = w.shape[0]
        if width != 1:
            raise ModelError(f"layers[{len(layers) - 1}]: {width} outputs; the last layer must have one, the score")
        self.trained = trained or {}
        self._index = None  # (columns tuple, input positions)

    @classmethod
    def load(cls, path):
        with open(path) as f:
            data = json.load(f)
        if data.get("format") != FORMAT:
            raise ModelError(f"format {data.get('format')!r}: want {FORMAT!r}")
        unknown = set(data) - {"format", "columns", "layers", "trained"}
        if unknown:
            raise ModelError(f"unknown fields {sorted(unknown)}; want format, columns, layers, trained")
        return cls(data.get("columns", []), data.get("layers", []), data.get("trained"))

    @classmethod
    def linear(cls, weights, **trained):
        """A one-layer model from weights by column name."""
        columns = list(weights)
        return cls(columns, [{"weights": [[float(weights[c]) for c in columns]], "bias": [0.0]}], trained)

    def to_dict(self):
        layers = []
        for w, b, act in self.layers:
            layer = {"weights": w.tolist(), "bias": b.tolist()}
            if act != "linear":
                layer["activation"] = act
            layers.append(layer)
        return {"format": FORMAT, "columns": self.columns, "layers": layers, "trained": self.trained}

    def save(self, path):
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1, sort_keys=True)
            f.write("\n")

    def _inputs(self, columns):
        key = tuple(columns)
        if self._index is None or self._index[0] != key:
            missing = [c for c in self.columns if c not in key]
            if missing:
                raise ModelError(f"columns {missing}: not among the observation's columns {list(key)}")
            self._index = (key, [key.index(c) for c in self.columns])
        return self._index[1]

    def scores(self, matrix, columns):
        """One float64 score per row of matrix (rows × columns).

        Each output is bias + w[0]·x[0] + w[1]·x[1] + ..., summed in that
        order, as gpusched sums it (no matrix product, whose summation order
        is the BLAS library's).
        """
        x = np.asarray(matrix, dtype=np.float32)[:, self._inputs(columns)].astype(np.float64)
        for w, b, act in self.layers:
            y = np.empty((x.shape[0], w.shape[0]))
            for o in range(w.shape[0]):
                s = np.full(x.shape[0], b[o])
                for i in range(w.shape[1]):
                    s = s + w[o, i] * x[:, i]
                y[:, o] = s
            x = np.where(y <= 0, 0.0, y) if act == "relu" else y  # +0 for −0 too, as gpusched
        return x[:, 0]

    def act(self, obs):
        """The best-scored node inside the observation's action mask (the
        first of equal scores)."""
        s = self.scores(obs["nodes"], obs["columns"])
        s[~obs["action_mask"]] = -np.inf
        return int(np.argmax(s))

    def __call__(self, pod, matrix, columns, request=None):
        """The server's score function (server.serve)."""
        return self.scores(matrix, columns)


def _main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    model = Model.load(argv[1])
    columns = argv[3].split(",")
    values = np.fromfile(argv[2], dtype="<f4")
    for s in model.scores(values.reshape(-1, len(columns)), columns):
        print(repr(float(s)))


if __name__ == "__main__":
    _main(sys.argv)
