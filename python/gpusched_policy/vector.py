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
    seed given to reset (42 without one), so the episodes a run plays do not
    depend on how fast each one goes. An episode with no pod to place is
    skipped. When an episode ends, step resets that environment
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
        self._next_seed = [42 + i for i in range(n)]

    @property
    def node_names(self):
        return self.envs[0].node_names

    @property
    def columns(self):
        return self.envs[0].columns

    def reset(self, seed=None):
        """Starts an episode in every environment, environment i with seed
        seed+i (without a seed, each with its next seed: 42+i at first) and
        returns the stacked first observations and their infos."""
        if seed is not None:
            self._next_seed = [seed + i for i in range(self.num_envs)]
        results, error = self._exchange([(i, SimEnv._reset_request(self._take_seed(i))) for i in range(self.num_envs)],
                                        lambda env, reply: env._reset_reply(reply))
        if error is not None:
            raise error
        for i, (obs, info) in enumerate(results):
            results[i] = self._until_observed(i, obs, info)
        return self._stack([o for o, _ in results]), [info for _, info in results]

    def step(self, actions):
        """Places each environment's pending pod on the node actions[i] names.
        Returns (observations, rewards, terminated, truncated, infos). A
        refused action raises EnvError after every environment's reply is
        read: the environments that took theirs have moved on (those whose
        episode ended reset to their next seed, as always), the refused ones
        are where they were."""
        if len(actions) != self.num_envs:
            raise ValueError(f"{len(actions)} actions for {self.num_envs} environments")
        results, error = self._exchange([(i, SimEnv._step_request(a)) for i, a in enumerate(actions)],
                                        lambda env, reply: env._step_reply(reply))
        if error is not None:
            ended = [i for i, r in enumerate(results) if r is not None and (r[2] or r[3])]
            self._reset_ended(ended, [None] * self.num_envs)
            raise error
        obs = [r[0] for r in results]
        rewards = np.array([r[1] for r in results], dtype=np.float64)
        terminated = np.array([r[2] for r in results], dtype=bool)
        truncated = np.array([r[3] for r in results], dtype=bool)
        infos = [r[4] for r in results]
        self._reset_ended([i for i in range(self.num_envs) if terminated[i] or truncated[i]], obs)
        return self._stack(obs), rewards, terminated, truncated, infos

    # --- the protocol, every environment at once ---------------------------

    def _reset_ended(self, ended, obs):
        """Resets the environments ended to their next seeds; obs[i] becomes
        each one's first observation."""
        if not ended:
            return
        resets, error = self._exchange([(i, SimEnv._reset_request(self._take_seed(i))) for i in ended],
                                       lambda env, reply: env._reset_reply(reply))
        if error is not None:
            raise error
        for i, (o, info) in zip(ended, resets):
            obs[i], _ = self._until_observed(i, o, info)

    def _take_seed(self, i):
        seed = self._next_seed[i]
        self._next_seed[i] += self.num_envs
        return seed

    def _exchange(self, requests, handle):
        """Sends each (environment index, request), then reads the reply of
        every request sent, in order, through handle(env, reply). Returns
        the results (None where sending or the reply failed) and the first
        error, or None: every reply is read before the caller raises it, so
        that the next exchange reads its own replies."""
        sent, first_error = [], None
        for i, req in requests:
            try:
                self.envs[i]._send(req)
                sent.append(i)
            except Exception as e:  # noqa: BLE001 - returned to the caller
                first_error = first_error or e
        results = []
        for i, _ in requests:
            if i not in sent:
                results.append(None)
                continue
            try:
                results.append(handle(self.envs[i], self.envs[i]._receive()))
            except Exception as e:  # noqa: BLE001 - returned to the caller
                results.append(None)
                first_error = first_error or e
        return results, first_error

    def _until_observed(self, i, obs, info, tries=100):
        """Resets environment i to its next seeds while its episode ends at
        once (no pod fits anywhere), at most tries more times, so that every
        observation has a pod."""
        env = self.envs[i]
        for _ in range(tries):
            if obs["builtin_action"] >= 0:
                return obs, info
            obs, info = env._reset_reply(env._call(SimEnv._reset_request(self._take_seed(i))))
        if obs["builtin_action"] >= 0:
            return obs, info
        raise RuntimeError(f"environment {i}: {tries + 1} episodes in a row had no pod to place")

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
