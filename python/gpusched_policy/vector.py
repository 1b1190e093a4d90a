"""Several simulator episodes stepped at once.

SimVecEnv runs n SimEnv subprocesses and steps them together: it sends every
subprocess its request before it reads any reply, so the episodes' scheduling
cycles run in parallel on as many cores as there are subprocesses, while
Python waits once per step for all of them. Observations are stacked along a
first axis of size n.
"""

import numpy as np

from .env import SimEnv


class SimVecEnv:
    """n independent episodes of the same cluster and workload.

    Environment i plays the seeds seed+i, seed+i+n, seed+i+2n, ... of the
    seed given to reset, so the episodes a run plays do not depend on how
    fast each one goes. When an episode ends, step resets that environment
    to its next seed at once (Gymnasium's same-step autoreset): the returned
    observation is the new episode's first, terminated[i] is True, and
    infos[i] is the finished episode's last info (with
    "unallocated_pct_at_100").

    Observations are dicts of stacked arrays: "nodes" (n × nodes × columns,
    float32), "action_mask" (n × nodes, bool), "builtin_action" (n, int64),
    "pod" (a list of n Pod messages) and "columns".
    """

    def __init__(self, n, nodes=None, pods=None, **kwargs):
        if n < 1:
            raise ValueError(f"n={n}: want at least one environment")
        self.envs = []
        try:
            for _ in range(n):
                self.envs.append(SimEnv(nodes, pods, **kwargs))
        except BaseException:
            self.close()
            raise
        self.num_envs = n
        self._next_seed = [0] * n

    @property
    def node_names(self):
        return self.envs[0].node_names

    @property
    def columns(self):
        return self.envs[0].columns

    def reset(self, seed=42):
        """Starts an episode in every environment (environment i with seed
        seed+i) and returns the stacked first observations and their infos."""
        n = self.num_envs
        for i, env in enumerate(self.envs):
            env._send(env._reset_request(seed + i))
            self._next_seed[i] = seed + i + n
        results = [env._reset_reply(env._receive()) for env in self.envs]
        return self._stack([o for o, _ in results]), [info for _, info in results]

    def step(self, actions):
        """Places each environment's pending pod on the node actions[i] names.
        Returns (observations, rewards, terminated, truncated, infos)."""
        if len(actions) != self.num_envs:
            raise ValueError(f"{len(actions)} actions for {self.num_envs} environments")
        for env, a in zip(self.envs, actions):
            env._send(env._step_request(a))
        results = [env._step_reply(env._receive()) for env in self.envs]
        obs = [r[0] for r in results]
        rewards = np.array([r[1] for r in results], dtype=np.float64)
        terminated = np.array([r[2] for r in results], dtype=bool)
        truncated = np.array([r[3] for r in results], dtype=bool)
        infos = [r[4] for r in results]
        done = [i for i in range(self.num_envs) if terminated[i] or truncated[i]]
        for i in done:
            env = self.envs[i]
            env._send(env._reset_request(self._next_seed[i]))
            self._next_seed[i] += self.num_envs
        for i in done:
            obs[i], _ = self.envs[i]._reset_reply(self.envs[i]._receive())
        return self._stack(obs), rewards, terminated, truncated, infos

    def close(self):
        for env in self.envs:
            env.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _stack(self, obs):
        return {
            "nodes": np.stack([o["nodes"] for o in obs]),
            "action_mask": np.stack([o["action_mask"] for o in obs]),
            "builtin_action": np.array([o["builtin_action"] for o in obs], dtype=np.int64),
            "pod": [o["pod"] for o in obs],
            "columns": self.columns,
        }
