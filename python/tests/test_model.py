import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from tests.helpers import PYTHON_DIR  # noqa: F401 (puts the package on the path)

from gpusched_policy.model import FORMAT, Model, ModelError

# The model of Go's TestModelScore: h0 = relu(2·builtin − 1),
# h1 = relu(−builtin + 3·free_gpu), score = h0 − 0.5·h1 + 0.25.
TWO_LAYER = {
    "format": FORMAT,
    "columns": ["builtin_score", "free_gpu"],
    "layers": [
        {"weights": [[2, 0], [-1, 3]], "bias": [-1, 0], "activation": "relu"},
        {"weights": [[1, -0.5]], "bias": [0.25]},
    ],
}
COLUMNS = ["fits", "free_gpu", "builtin_score"]


class ModelTest(unittest.TestCase):
    def test_scores(self):
        m = Model(TWO_LAYER["columns"], TWO_LAYER["layers"])
        # Rows of COLUMNS (fits, free_gpu, builtin_score); the arithmetic of
        # each score is Go's TestModelScore's.
        rows = np.array([[1, 0, 1],  # h0 = 1, h1 = 0: 1.25
                         [1, 0.5, 0.5],  # h0 = 0, h1 = 1: −0.25
                         [1, 1, 0],  # h0 = 0, h1 = 3: −1.25
                         [1, 0.25, 0.75]], dtype=np.float32)  # h0 = 0.5, h1 = 0: 0.75
        np.testing.assert_array_equal(m.scores(rows, COLUMNS), [1.25, -0.25, -1.25, 0.75])

    def test_act_keeps_to_the_mask_and_takes_the_first_best(self):
        m = Model.linear({"builtin_score": 1.0})
        rows = np.array([[1, 0, 0.5], [1, 0, 1], [1, 0, 1], [1, 0, 2]], dtype=np.float32)
        obs = {"nodes": rows, "columns": COLUMNS, "action_mask": np.array([True, True, True, False])}
        self.assertEqual(m.act(obs), 1)  # node 3 scores 2 but is masked; 1 and 2 tie, 1 first

    def test_relu_gives_positive_zero(self):
        # A pre-activation of −0 (bias −0, every product ±0) is +0 after the
        # ReLU, as in gpusched.
        m = Model(["fits"], [{"weights": [[-1.0]], "bias": [-0.0], "activation": "relu"}])  # −0 + (−1·0) = −0
        s = m.scores(np.array([[0.0]], dtype=np.float32), ["fits"])
        self.assertEqual(np.copysign(1.0, s[0]), 1.0)

    def test_save_and_load(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.json")
            Model(TWO_LAYER["columns"], TWO_LAYER["layers"], {"note": "by hand"}).save(path)
            with open(path) as f:
                data = json.load(f)
            self.assertEqual(data["format"], FORMAT)
            self.assertEqual(data["layers"][0]["activation"], "relu")
            self.assertNotIn("activation", data["layers"][1])
            m = Model.load(path)
            self.assertEqual(m.trained, {"note": "by hand"})
            self.assertEqual(float(m.scores(np.array([[1, 0.25, 0.75]]), COLUMNS)[0]), 0.75)

    def test_errors_name_the_field(self):
        cases = [
            ([], [{"weights": [[1]], "bias": [0]}], "columns: empty"),
            (["fits"], [], "layers: empty"),
            (["fits", "gpus"], [{"weights": [[1]], "bias": [0]}], "layers[0].weights: shape (1, 1); want (outputs, 2)"),
            (["fits"], [{"weights": [[1]], "bias": [0, 1]}], "layers[0].bias: 2 values; want 1"),
            (["fits"], [{"weights": [[1]], "bias": [0], "activation": "tanh"}], "layers[0].activation 'tanh'"),
            (["fits"], [{"weights": [[1], [1]], "bias": [0, 0]}], "layers[0]: 2 outputs; the last layer must have one"),
            (["fits"], [{"weights": [[float("nan")]], "bias": [0]}], "layers[0]: a weight or bias is not finite"),
            (["fits"], [{"weights": [[1]]}], "layers[0]: fields ['weights']; want weights, bias"),
            (["fits"], [{"weights": [[1]], "bias": [0], "dropout": 0.1}], "layers[0]: fields ['bias', 'dropout', 'weights']"),
            (["fits"], [{"weights": [["1"]], "bias": [0]}], "layers[0].weights: a string; want numbers"),
        ]
        for columns, layers, want in cases:
            with self.subTest(want=want):
                with self.assertRaises(ModelError) as ctx:
                    Model(columns, layers)
                self.assertIn(want, str(ctx.exception))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.json")
            with open(path, "w") as f:
                json.dump({"format": "onnx"}, f)
            with self.assertRaises(ModelError) as ctx:
                Model.load(path)
            self.assertIn("format 'onnx': want 'gpusched.io/model/v1'", str(ctx.exception))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.json")
            with open(path, "w") as f:
                json.dump({**TWO_LAYER, "colums": []}, f)
            with self.assertRaises(ModelError) as ctx:
                Model.load(path)
            self.assertIn("unknown fields ['colums']", str(ctx.exception))
        m = Model.linear({"gpu_temperature": 1.0})
        with self.assertRaises(ModelError) as ctx:
            m.scores(np.zeros((1, 3)), COLUMNS)
        self.assertIn("['gpu_temperature']: not among the observation's columns", str(ctx.exception))

    def test_command_prints_exact_scores(self):
        with tempfile.TemporaryDirectory() as d:
            model, matrix = os.path.join(d, "m.json"), os.path.join(d, "rows.f32")
            with open(model, "w") as f:
                json.dump(TWO_LAYER, f)
            np.array([[1, 0.1, 0.3], [1, 0, 1]], dtype="<f4").tofile(matrix)
            out = subprocess.run([sys.executable, "-m", "gpusched_policy.model", model, matrix, ",".join(COLUMNS)],
                                 cwd=PYTHON_DIR, check=True, capture_output=True, text=True).stdout.split()
            want = Model(TWO_LAYER["columns"], TWO_LAYER["layers"]).scores(
                np.array([[1, 0.1, 0.3], [1, 0, 1]], dtype=np.float32), COLUMNS)
            self.assertEqual([float(v) for v in out], list(want))
            self.assertEqual(float(out[1]), 1.25)


if __name__ == "__main__":
    unittest.main()
