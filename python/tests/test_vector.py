import unittest

import numpy as np

from tests.helpers import NODES, TraceTestCase

from gpusched_policy.env import EnvError, SimEnv
from gpusched_policy.vector import SimVecEnv


def builtin_episode(env, seed):
    """The actions and the last info of seed's episode under builtin_action,
    and its first observation."""
    obs, _ = env.reset(seed=seed)
    first, actions = obs, []
    while True:
        actions.append(obs["builtin_action"])
        obs, _, terminated, _, info = env.step(actions[-1])
        if terminated:
            return actions, info, first


class SimVecEnvTest(TraceTestCase):
    def test_episodes_are_the_single_environments(self):
        """Environment i plays seeds 3+i, 3+i+2, ...: stepped with
        builtin_action, each episode takes the actions and ends with the info
        of SimEnv's episode of its seed, and the environment that finished
        first starts its next seed's episode in the same step."""
        with SimEnv(self.nodes, self.pods, binary=self.binary) as single:
            want = {seed: builtin_episode(single, seed) for seed in (3, 4, 5)}
        with SimVecEnv(2, self.nodes, self.pods, binary=self.binary) as vec:
            obs, _ = vec.reset(seed=3)
            self.assertEqual(obs["nodes"].shape, (2, len(NODES), len(vec.columns)))
            self.assertEqual(obs["action_mask"].shape, (2, len(NODES)))
            np.testing.assert_array_equal(obs["nodes"][0], want[3][2]["nodes"])
            np.testing.assert_array_equal(obs["nodes"][1], want[4][2]["nodes"])
            taken = {0: [], 1: []}
            ended = {}
            while len(ended) < 2:
                actions = obs["builtin_action"]
                for i in (0, 1):
                    if i not in ended:
                        taken[i].append(int(actions[i]))
                obs, rewards, terminated, truncated, infos = vec.step(actions)
                self.assertEqual(rewards.shape, (2,))
                self.assertFalse(truncated.any())
                for i in (0, 1):
                    if terminated[i] and i not in ended:
                        ended[i] = infos[i]
                        if i == 0:
                            # Same-step autoreset: seed 5's first observation.
                            np.testing.assert_array_equal(obs["nodes"][0], want[5][2]["nodes"])
            for i in (0, 1):
                actions, info, _ = want[3 + i]
                self.assertEqual(taken[i], actions, f"environment {i}")
                self.assertEqual(ended[i], info, f"environment {i}'s last info")

    def test_refused_action_keeps_replies_in_step(self):
        """A refused action raises EnvError once every environment answered:
        the next step's replies are that step's own (the other environment
        moved on, the refused one is where it was)."""
        with SimEnv(self.nodes, self.pods, binary=self.binary) as single:
            want = {seed: builtin_episode(single, seed) for seed in (3, 4)}
            seed43_first, _ = single.reset(seed=43)
        with SimVecEnv(2, self.nodes, self.pods, binary=self.binary) as vec:
            obs, _ = vec.reset()  # seeds 42 and 43
            np.testing.assert_array_equal(obs["nodes"][1], seed43_first["nodes"])
            obs, _ = vec.reset(seed=3)
            out_of_range = len(vec.node_names) + 5
            with self.assertRaisesRegex(EnvError, "out of range"):
                vec.step([out_of_range, obs["builtin_action"][1]])
            # Environment 0 is still at its first pod, environment 1 one step on.
            actions = [want[3][0][0], want[4][0][1]]
            obs, _, _, _, _ = vec.step(actions)
            self.assertEqual(int(obs["builtin_action"][0]), want[3][0][1])
            self.assertEqual(int(obs["builtin_action"][1]), want[4][0][2])

    def test_one_action_per_environment(self):
        with SimVecEnv(2, self.nodes, self.pods, binary=self.binary) as vec:
            vec.reset(seed=1)
            with self.assertRaisesRegex(ValueError, "1 actions for 2 environments"):
                vec.step([0])

    def test_at_least_one_environment(self):
        with self.assertRaisesRegex(ValueError, "n=0"):
            SimVecEnv(0, self.nodes, self.pods, binary=self.binary)


if __name__ == "__main__":
    unittest.main()
