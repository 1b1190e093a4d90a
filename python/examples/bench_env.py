"""Measures the environment's speed: steps per second of an episode driven
by builtin_action from Python, and where the time goes (the Go side's
scheduling, features and measurements, as it reports them on stderr at
exit; Python's decoding; the rest is the pipe); with --rollouts, also the
speed of branching from a state (a reset replaying the actions taken, then
finish()); with --vector N, the steps/s of N episodes stepped at once
(SimVecEnv) against one, in rounds taken interleaved.

    /usr/bin/python3 python/examples/bench_env.py \
        --nodes ../shared/traces/alibaba-gpu-2023/openb_node_list_gpu_node.csv \
        --pods ../shared/traces/alibaba-gpu-2023/openb_pod_list_default.csv
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpusched_policy.env import SimEnv  # noqa: E402
from gpusched_policy.vector import SimVecEnv  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", required=True)
    ap.add_argument("--pods", required=True)
    ap.add_argument("--policy")
    ap.add_argument("--arrival", default="fgd")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--binary")
    ap.add_argument("--score-columns", default="", help="policies whose score columns the observation adds, e.g. FragFit,FGD")
    ap.add_argument("--rollouts", action="store_true", help="also time replaying to a state and finishing from it")
    ap.add_argument("--vector", type=int, default=0, metavar="N",
                    help="only compare N episodes stepped at once with one, interleaved, --steps steps each")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.vector:
        compare_vector(args)
        return

    env = SimEnv(args.nodes, args.pods, binary=args.binary, policy=args.policy, arrival=args.arrival,
                 score_columns=[c for c in args.score_columns.split(",") if c], extra_args=["--timings"])
    t0 = time.perf_counter()
    obs, info = env.reset(seed=args.seed)
    t_reset = time.perf_counter() - t0
    steps, t_call = 0, 0.0
    t1 = time.perf_counter()
    while True:
        a = obs["builtin_action"]
        s = time.perf_counter()
        obs, reward, terminated, truncated, info = env.step(a)
        t_call += time.perf_counter() - s
        steps += 1
        if terminated or truncated:
            break
    wall = time.perf_counter() - t1
    env.close()
    print(f"reset {t_reset:.2f}s; {steps} steps in {wall:.2f}s: {steps / wall:.0f} steps/s "
          f"({1e3 * wall / steps:.3f} ms/step, of which {1e3 * t_call / steps:.3f} ms in step())")
    print(f"info at the end: {info}")
    print(env.stderr_text.strip().splitlines()[-1])
    if args.rollouts:
        # Branching: from states half-way and three quarters of the way
        # through the episode, a reset replaying the actions taken and a
        # finish() placing the rest as the scheduler does.
        env = SimEnv(args.nodes, args.pods, binary=args.binary, policy=args.policy, arrival=args.arrival)
        obs, _ = env.reset(seed=args.seed)
        actions = []
        while True:
            actions.append(obs["builtin_action"])
            obs, _, terminated, _, _ = env.step(actions[-1])
            if terminated:
                break
        for frac in (0.5, 0.75):
            k = int(frac * len(actions))
            t0 = time.perf_counter()
            env.reset(seed=args.seed, options={"actions": actions[:k]})
            t1 = time.perf_counter()
            _, end = env.finish()
            t2 = time.perf_counter()
            print(f"branch at step {k}: replay {t1 - t0:.2f}s ({k / (t1 - t0):.0f} steps/s), finish "
                  f"{t2 - t1:.2f}s ({(len(actions) - k) / (t2 - t1):.0f} steps/s), "
                  f"{end.get('unallocated_pct_at_100')}% unallocated")
        env.close()


def vector_rate(args, n):
    """Steps per second, summed over n environments stepped together for
    args.steps steps each with builtin_action (resets not timed)."""
    with SimVecEnv(n, args.nodes, args.pods, binary=args.binary, policy=args.policy, arrival=args.arrival) as vec:
        obs, _ = vec.reset(seed=args.seed)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            obs, _, _, _, _ = vec.step(obs["builtin_action"])
        return n * args.steps / (time.perf_counter() - t0)


def compare_vector(args):
    """One environment, then args.vector, alternately, args.rounds times;
    prints each round and the median and range of the ratio."""
    ratios = []
    for r in range(args.rounds):
        one = vector_rate(args, 1)
        many = vector_rate(args, args.vector)
        load = os.getloadavg()[0]
        ratios.append(many / one)
        print(f"round {r + 1}: 1 environment {one:.0f} steps/s, {args.vector} at once {many:.0f} steps/s "
              f"(ratio {many / one:.2f}; load {load:.2f})")
    ratios.sort()
    print(f"ratio median {ratios[len(ratios) // 2]:.2f}, range {ratios[0]:.2f}-{ratios[-1]:.2f} over {len(ratios)} rounds")


if __name__ == "__main__":
    main()
