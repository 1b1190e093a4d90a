"""The training recipe's pieces (python/examples/train_model.py) on a small
cluster: the candidates' configuration, their runs in the simulator with the
model in the scheduler, and a whole (tiny) training run."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

from tests.helpers import PYTHON_DIR, TraceTestCase

sys.path.insert(0, os.path.join(PYTHON_DIR, "examples"))

import train_model  # noqa: E402
from gpusched_policy.model import Model  # noqa: E402


class TrainModelTest(TraceTestCase):
    trace_pods, trace_seed = 80, 5

    def test_builtin_score_alone_is_the_builtin_policy(self):
        # The search starts at weights 0: builtin_score alone, which must
        # place exactly as the fallback policy does, seed by seed; a model
        # that prefers the emptiest node must not.
        models = {"alone": Model.linear({"builtin_score": 1.0}), "builtin": None,
                  "spread": Model.linear({"free_gpu_after": 1.0})}
        res = train_model.simulate(self.binary, self.nodes, self.pods, models, [1, 2, 3], "PairFit", 2)
        self.assertEqual(res["alone"], res["builtin"])
        self.assertEqual(len(res["builtin"]), 3)
        self.assertNotEqual(res["spread"], res["builtin"])

    def test_config_has_a_profile_per_candidate(self):
        with tempfile.TemporaryDirectory() as d:
            path = train_model.write_config({"a": Model.linear({"builtin_score": 1.0}), "b": None}, d, "FragFit")
            with open(path) as f:
                text = f.read()
        self.assertIn("- schedulerName: a\n", text)
        self.assertIn("- schedulerName: b\n", text)
        self.assertIn("        model: " + json.dumps(os.path.join(d, "a.json")), text)
        self.assertIn("        fallback: FragFit\n", text)
        self.assertIn("        type: FragFit\n", text)  # b: the fallback policy itself
        self.assertEqual(text.count("type: External"), 1)

    def test_training_writes_a_model_the_scheduler_loads(self):
        out = os.path.join(self.dir.name, "model.json")
        subprocess.run([sys.executable, os.path.join(PYTHON_DIR, "examples", "train_model.py"), "--binary", self.binary,
                        "--nodes", self.nodes, "--pods", self.pods, "--columns", "free_gpu_after,chosen_free_after",
                        "--train-seeds", "1", "--eval-seeds", "7", "--iterations", "2", "--population", "3",
                        "--elite", "2", "--out", out], check=True, capture_output=True)
        model = Model.load(out)
        self.assertEqual(model.columns, ["builtin_score", "free_gpu_after", "chosen_free_after"])
        self.assertEqual(model.trained["train_seeds"], [1])
        self.assertEqual(model.trained["eval_seeds"], [7])
        self.assertEqual(len(model.trained["history"]), 2)
        # The incumbent races again each iteration, so the best never gets
        # worse from one iteration to the next.
        bests = [h["best"] for h in model.trained["history"]]
        self.assertLessEqual(bests[1], bests[0])
        # And the scheduler itself runs it.
        res = train_model.simulate(self.binary, self.nodes, self.pods, {"m": model}, [7], "PairFit", 1)
        self.assertEqual(res["m"], model.trained["eval_unallocated_pct"])


if __name__ == "__main__":
    unittest.main()
