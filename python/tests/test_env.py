import json
import os
import subprocess
import unittest

import numpy as np

from tests.helpers import NODES, TraceTestCase

from gpusched_policy.env import EnvError, SimEnv


class SimEnvTest(TraceTestCase):
    def env(self, **kw):
        env = SimEnv(self.nodes, self.pods, binary=self.binary, **kw)
        self.addCleanup(env.close)
        return env

    def test_episode(self):
        """reset, then steps to the end: one row per node, the mask within
        the nodes, rewards and info as documented."""
        env = self.env()
        obs, info = env.reset(seed=3)
        start_fragment = info["fragment_pct"]
        self.assertEqual(env.node_names, [n[0] for n in NODES])
        self.assertEqual(env.node_models, [n[4] for n in NODES])
        steps, total = 0, 0.0
        while True:
            self.assertEqual(obs["nodes"].shape, (len(NODES), len(obs["columns"])))
            self.assertEqual(obs["nodes"].dtype, np.float32)
            self.assertEqual(obs["action_mask"].dtype, bool)
            self.assertTrue(obs["action_mask"][obs["builtin_action"]])
            fits = obs["nodes"][:, obs["columns"].index("fits")]
            np.testing.assert_array_equal(fits, obs["action_mask"].astype(np.float32))
            obs, reward, terminated, truncated, info = env.step(obs["builtin_action"])
            steps, total = steps + 1, total + reward
            self.assertFalse(truncated)
            if terminated:
                break
        self.assertEqual(steps, info["placed_pods"])
        self.assertIn("unallocated_pct_at_100", info)
        # The fragmentation rewards sum to −(the change of fragmentation over
        # the episode; an empty node may be fragmented for typical pods).
        self.assertAlmostEqual(total, start_fragment - info["fragment_pct"], places=6)

    def test_mask_excludes_infeasible_nodes(self):
        """A pod that asks for V100s fits no T4 node: the Filter plugins
        reject those, and the mask says so."""
        env = self.env()
        obs, _ = env.reset(seed=1)
        t4 = np.array([n[4] == "T4" for n in NODES])
        seen = 0
        while True:
            if list(obs["pod"].models) == ["V100"]:
                seen += 1
                self.assertFalse(obs["action_mask"][t4].any(), obs["action_mask"])
            obs, _, terminated, _, _ = env.step(obs["builtin_action"])
            if terminated:
                break
        self.assertGreater(seen, 0)

    def test_masked_action_is_refused(self):
        env = self.env()
        obs, _ = env.reset(seed=2)
        while obs["action_mask"].all():
            obs, _, terminated, _, _ = env.step(obs["builtin_action"])
            self.assertFalse(terminated, "no node was ever outside the mask")
        masked = int(np.flatnonzero(~obs["action_mask"])[0])
        with self.assertRaisesRegex(EnvError, f"action {masked} .* is outside the action mask"):
            env.step(masked)
        with self.assertRaisesRegex(EnvError, "out of range"):
            env.step(len(NODES))
        # The episode is as it was: the same pod takes the builtin action.
        env.step(obs["builtin_action"])

    def test_builtin_reproduces_simulate(self):
        """An episode taking builtin_action is "gpusched simulate"'s run for
        the seed: the same unallocated % at 100% arrived, placed and failed
        pods, for both tie-breaks and both arrival modes."""
        for arrival, tie_break, seed in (("fgd", "node-order", 4), ("fgd", "random", 5), ("replay", "random", 6)):
            with self.subTest(arrival=arrival, tie_break=tie_break):
                out = os.path.join(self.dir.name, f"sim-{arrival}-{tie_break}.json")
                subprocess.run([self.binary, "simulate", "--quiet", "--nodes", self.nodes, "--pods", self.pods,
                                "--seeds", str(seed), "--arrival", arrival, "--tie-break", tie_break, "--json", out],
                               check=True, stdout=subprocess.DEVNULL)
                with open(out) as f:
                    run = json.load(f)["runs"][0]
                env = self.env(arrival=arrival, tie_break=tie_break)
                obs, info = env.reset(seed=seed)
                while True:
                    obs, _, terminated, _, info = env.step(obs["builtin_action"])
                    if terminated:
                        break
                self.assertEqual(info["placed_pods"], run["placed_pods"])
                self.assertEqual(info["failed_pods"], run["failed_pods"])
                self.assertEqual(info.get("unallocated_pct_at_100"), run["unallocated_pct_at_100"])

    def test_branch_with_replay_and_finish(self):
        """A reset with the actions taken so far returns to the same state;
        finish from there ends where stepping builtin_action ends; so a
        rollout of each candidate node from a state compares them."""
        env = self.env(reward="unallocated")
        obs, _ = env.reset(seed=3)
        actions = []
        for _ in range(10):
            actions.append(int(np.flatnonzero(obs["action_mask"])[-1]))  # not the scheduler's choice
            obs, _, terminated, _, _ = env.step(actions[-1])
            self.assertFalse(terminated)
        replayed, _ = env.reset(seed=3, options={"actions": actions})
        np.testing.assert_array_equal(replayed["nodes"], obs["nodes"])
        np.testing.assert_array_equal(replayed["action_mask"], obs["action_mask"])
        self.assertEqual(replayed["builtin_action"], obs["builtin_action"])
        while True:
            obs, reward, terminated, _, stepped = env.step(obs["builtin_action"])
            if terminated:
                break
        env.reset(seed=3, options={"actions": actions})
        finished_reward, finished = env.finish()
        self.assertEqual(finished, stepped)
        self.assertEqual(finished_reward, reward)  # the unallocated reward: −(unallocated at 100%)
        with self.assertRaisesRegex(EnvError, "the episode is over"):
            env.finish()
        with self.assertRaisesRegex(EnvError, r"reset: actions\[0\]: action 99 is out of range"):
            env.reset(seed=3, options={"actions": [99]})

    def test_score_columns(self):
        """score_columns adds "<policy>_score" after the feature columns: in
        a FragFit episode, its own column is builtin_score; FGD's is 0 off the
        mask and within 0..1 on it."""
        env = self.env(policy="FragFit", score_columns=("FragFit", "FGD"))
        obs, _ = env.reset(seed=3)
        self.assertEqual(obs["columns"][-2:], ["FragFit_score", "FGD_score"])
        for _ in range(5):
            nodes, cols = obs["nodes"], obs["columns"]
            np.testing.assert_array_equal(nodes[:, cols.index("FragFit_score")], nodes[:, cols.index("builtin_score")])
            fgd = nodes[:, cols.index("FGD_score")]
            self.assertTrue(np.all(fgd[~obs["action_mask"]] == 0))
            self.assertTrue(np.all((fgd >= 0) & (fgd <= 1)))
            obs, _, terminated, _, _ = env.step(obs["builtin_action"])
            if terminated:
                break
        bad = SimEnv(self.nodes, self.pods, binary=self.binary, score_columns=("Tetris",))
        with self.assertRaisesRegex(RuntimeError, r'score column: unknown policy .*Tetris'):
            bad.reset(seed=1)
        bad.close()

    def test_bad_flag_is_reported(self):
        env = SimEnv(self.nodes, self.pods, binary=self.binary, reward="nonsense")
        with self.assertRaisesRegex(RuntimeError, "reward .*nonsense.*want fragmentation"):
            env.reset(seed=1)
        env.close()


if __name__ == "__main__":
    unittest.main()
