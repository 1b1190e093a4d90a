"""The simulator as a Gymnasium-style environment.

SimEnv runs "gpusched simulate env" as a subprocess and speaks its protocol
(proto/gpusched/policy/v1alpha1/policy.proto, EnvRequest and EnvReply, each
framed by a 4-byte little-endian length) over the subprocess's stdin and
stdout. An episode is "gpusched simulate"'s run of the policy with the seed;
each step places the pending pod on the node the action names.
"""

import os
import subprocess
import tempfile

import numpy as np

from . import policy_pb2 as pb
from .framing import read_frame, write_frame
from .matrix import to_array

try:  # Gymnasium is optional: without it SimEnv is a plain class.
    import gymnasium as _gym

    _Base = _gym.Env
except ImportError:  # pragma: no cover - depends on the machine
    _gym = None
    _Base = object


class EnvError(ValueError):
    """A request the environment refused (an action outside the mask, a step
    before reset); the episode is as it was."""


def default_binary():
    """The gpusched binary: $GPUSCHED_BIN, else bin/gpusched of the repository."""
    if os.environ.get("GPUSCHED_BIN"):
        return os.environ["GPUSCHED_BIN"]
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(repo, "bin", "gpusched")


class SimEnv(_Base):
    """gpusched's simulator as an environment.

    Observations are dicts: "pod" (the Pod message), "nodes" (float32 array,
    one row per node of the cluster, in the order of node_names), "columns"
    (the feature columns), "action_mask" (bool per node: every Filter plugin
    accepts the pod there) and "builtin_action" (the node the policy itself
    would choose). An action is a node index inside the mask.

    score_columns (policy names, e.g. ("FragFit", "FGD")) adds a column
    "<policy>_score" per policy after the feature columns: what that
    policy's GPUPlacement would score each node, 0..1, 0 off the mask.
    """

    metadata = {"render_modes": []}

    def __init__(self, nodes=None, pods=None, *, binary=None, config=None, policy=None, arrival=None,
                 tie_break=None, reward=None, no_screen=False, score_columns=(), extra_args=()):
        args = [binary or default_binary(), "simulate", "env"]
        if score_columns:
            args += ["--score-columns", ",".join(score_columns)]
        for flag, value in (("--nodes", nodes), ("--pods", pods), ("--config", config), ("--policy", policy),
                            ("--arrival", arrival), ("--tie-break", tie_break), ("--reward", reward)):
            if value is not None:
                args += [flag, str(value)]
        if no_screen:
            args.append("--no-screen")
        args += list(extra_args)
        self.args = args
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                      bufsize=1 << 20)
        self.node_names = []
        self.node_models = []
        self.columns = []
        self.action_space = None
        self.observation_space = None

    # --- Gymnasium's API -------------------------------------------------

    def reset(self, seed=None, options=None):
        """Starts an episode. options={"actions": [...]} replays those actions
        after the reset, with no observation in between, and observes the pod
        after the last: the reset with the actions an episode took so far
        returns to its state, to branch from it (see finish); they need the
        seed. When they end the episode, the observation is empty (an empty
        mask) and info is the episode's last."""
        if _gym is not None:
            super().reset(seed=seed)
        return self._reset_reply(self._call(self._reset_request(seed, options)))

    def step(self, action):
        return self._step_reply(self._call(self._step_request(action)))

    # Requests and replies of reset and step, apart so that SimVecEnv can
    # send every environment's request before it reads any reply.

    @staticmethod
    def _reset_request(seed, options=None):
        req = pb.ResetRequest()
        if seed is not None:
            req.seed = int(seed)
        if options and options.get("actions") is not None:
            req.actions.extend(int(a) for a in options["actions"])
        return pb.EnvRequest(reset=req)

    def _reset_reply(self, reply):
        reply = reply.reset
        self.node_names = list(reply.nodes)
        self.node_models = list(reply.node_models)
        if not reply.HasField("observation"):
            # The replayed actions ended the episode: info is its last.
            return self._empty_observation(), self._info(reply.info)
        self.columns = list(reply.observation.nodes.columns)
        if _gym is not None and self.action_space is None:
            from gymnasium import spaces
            n = len(self.node_names)
            self.action_space = spaces.Discrete(n)
        return self._observation(reply.observation), self._info(reply.info)

    @staticmethod
    def _step_request(action):
        return pb.EnvRequest(step=pb.StepRequest(action=int(action)))

    def _step_reply(self, reply):
        reply = reply.step
        obs = self._observation(reply.observation) if reply.HasField("observation") else self._empty_observation()
        return obs, reply.reward, reply.terminated, reply.truncated, self._info(reply.info)

    def finish(self):
        """Places every remaining pod where the scheduler itself would, without
        observing them: a rollout under the built-in policy at the scheduler's
        speed. Returns (reward summed over the steps, info at the end)."""
        reply = self._call(pb.EnvRequest(finish=pb.FinishRequest())).step
        return reply.reward, self._info(reply.info)

    def close(self):
        proc, self._proc = getattr(self, "_proc", None), None
        if proc is None:
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        self.stderr_text = self._stderr_tail()
        self._stderr.close()

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- the protocol ----------------------------------------------------

    def _call(self, request):
        self._send(request)
        return self._receive()

    # _send and _receive are _call in two halves, so that SimVecEnv can have
    # every subprocess work on its request at once.

    def _send(self, request):
        if self._proc is None:
            raise EnvError("the environment is closed")
        try:
            write_frame(self._proc.stdin, request.SerializeToString())
        except BrokenPipeError as e:
            raise RuntimeError(f"{' '.join(self.args)} ended: {e}\n{self._stderr_tail()}") from e

    def _receive(self):
        try:
            reply = pb.EnvReply.FromString(read_frame(self._proc.stdout))
        except EOFError as e:
            raise RuntimeError(f"{' '.join(self.args)} ended: {e}\n{self._stderr_tail()}") from e
        if reply.WhichOneof("reply") == "error":
            raise EnvError(reply.error)
        return reply

    def _stderr_tail(self, limit=4000):
        if self._stderr.closed:
            return self.stderr_text[-limit:]
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace")
        return text[-limit:]

    def _observation(self, o):
        return {
            "pod": o.pod,
            "nodes": to_array(o.nodes),
            "columns": self.columns,
            "action_mask": np.frombuffer(o.action_mask, dtype=np.uint8).astype(bool),
            "builtin_action": int(o.builtin_action),
        }

    def _empty_observation(self):
        n = len(self.node_names)
        return {"pod": pb.Pod(), "nodes": np.zeros((n, len(self.columns)), dtype=np.float32),
                "columns": self.columns, "action_mask": np.zeros(n, dtype=bool), "builtin_action": -1}

    @staticmethod
    def _info(i):
        out = {"submitted_pods": i.submitted_pods, "placed_pods": i.placed_pods, "failed_pods": i.failed_pods,
               "arrived_pct": i.arrived_pct, "allocated_pct": i.allocated_pct, "fragment_pct": i.fragment_pct}
        if i.HasField("unallocated_pct_at_100"):
            out["unallocated_pct_at_100"] = i.unallocated_pct_at_100
        return out
