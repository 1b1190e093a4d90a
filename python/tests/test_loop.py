"""The loop closed: a scorer trained in the environment, served over the
policy service, decides in the scheduler's path (the simulator running
GPUPlacement with scoringStrategy External) exactly as it decided in the
environment."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

from tests.helpers import PYTHON_DIR, REPO, gpusched_binary, write_trace

from gpusched_policy.env import SimEnv
from gpusched_policy.scorer import LinearScorer


class LoopTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.binary = gpusched_binary()
        self.nodes, self.pods = write_trace(self.dir.name, pods=60, seed=3)

    def tearDown(self):
        self.dir.cleanup()

    def test_served_scorer_decides_as_in_the_environment(self):
        # A scorer unlike the built-in policy: spread onto the emptiest node.
        weights = os.path.join(self.dir.name, "w.json")
        scorer = LinearScorer({"free_gpu_after": 1.0, "idle_gpus_after": 0.5})
        scorer.save(weights)
        seed = 4

        env = SimEnv(self.nodes, self.pods, binary=self.binary, arrival="fgd")
        try:
            obs, info = env.reset(seed=seed)
            differ = 0
            while True:
                action = scorer.act(obs)
                differ += action != obs["builtin_action"]
                obs, _, terminated, _, info = env.step(action)
                if terminated:
                    break
        finally:
            env.close()
        self.assertGreater(differ, 0, "the scorer never differed from the built-in policy: the test proves nothing")

        server = subprocess.Popen([sys.executable, os.path.join(PYTHON_DIR, "examples", "serve_linear.py"),
                                   "--weights", weights, "--address", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
        try:
            address = server.stdout.readline().split()[-1]
            config = os.path.join(self.dir.name, "external.yaml")
            with open(os.path.join(REPO, "pkg", "simulator", "default-config.yaml")) as f:
                base = f.read()
            external = base.replace("      scoringStrategy:\n        type: PairFit\n",
                                    f"      external:\n        endpoint: {address}\n        fallback: PairFit\n"
                                    "        timeout: 5s\n      scoringStrategy:\n        type: External\n", 1)
            self.assertNotEqual(external, base)
            with open(config, "w") as f:
                f.write(external)
            out = os.path.join(self.dir.name, "served.json")
            subprocess.run([self.binary, "simulate", "--quiet", "--nodes", self.nodes, "--pods", self.pods,
                            "--config", config, "--seeds", str(seed), "--json", out], check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                run = json.load(f)["runs"][0]
        finally:
            server.terminate()
            server.wait(timeout=10)
            server.stdout.close()
        self.assertIsNotNone(info.get("unallocated_pct_at_100"))
        self.assertEqual(run["placed_pods"], info["placed_pods"])
        self.assertEqual(run["failed_pods"], info["failed_pods"])
        self.assertEqual(run.get("unallocated_pct_at_100"), info.get("unallocated_pct_at_100"))


if __name__ == "__main__":
    unittest.main()
