"""Trains a linear scorer over the environment's feature columns with the
cross-entropy method, and compares it with the built-in policy on held-out
seeds.

Each candidate is a weight vector over the columns; an episode places every
pod on the allowed node of the best score (LinearScorer.act), and its cost
is the episode's unallocated GPU % at 100% arrived (simulate's headline).
Each iteration samples --population candidates from a Gaussian, keeps the
--elite best by their mean over the training seeds, and refits the Gaussian
to them. --every K keeps every K-th node of the cluster (the FGD arrival then
submits pods until 1.3 × that smaller capacity), for shorter episodes.

    /usr/bin/python3 python/examples/train_linear.py \
        --nodes ../shared/traces/alibaba-gpu-2023/openb_node_list_gpu_node.csv \
        --pods ../shared/traces/alibaba-gpu-2023/openb_pod_list_default.csv \
        --every 8 --train-seeds 1,2 --eval-seeds 101..104 --out python/examples/linear_scorer.json
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpusched_policy.env import SimEnv  # noqa: E402
from gpusched_policy.scorer import LinearScorer  # noqa: E402


def parse_seeds(s):
    if ".." in s:
        lo, hi = s.split("..")
        return list(range(int(lo), int(hi) + 1))
    return [int(x) for x in s.split(",") if x.strip()]


def subsample_nodes(path, every, directory):
    """Every k-th node of a node CSV, written into directory."""
    if every <= 1:
        return path
    with open(path) as f:
        header, *rows = f.read().splitlines()
    out = os.path.join(directory, f"nodes-every-{every}.csv")
    with open(out, "w") as f:
        f.write("\n".join([header] + rows[::every]) + "\n")
    return out


def episode(env, seed, act):
    """Runs one episode choosing with act(obs); returns its final info."""
    obs, info = env.reset(seed=seed)
    while True:
        obs, _, terminated, truncated, info = env.step(act(obs))
        if terminated or truncated:
            return info


def unallocated(info):
    # An episode that never reached 100% arrived has no headline: count it
    # as everything unallocated beyond what it allocated.
    return info.get("unallocated_pct_at_100", 100 - info["allocated_pct"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", required=True)
    ap.add_argument("--pods", required=True)
    ap.add_argument("--binary")
    ap.add_argument("--policy", help="the environment's policy (builtin_action, builtin_score); default the config's")
    ap.add_argument("--every", type=int, default=1, help="keep every K-th node")
    ap.add_argument("--train-seeds", default="1,2")
    ap.add_argument("--eval-seeds", default="101..104")
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--population", type=int, default=12)
    ap.add_argument("--elite", type=int, default=3)
    ap.add_argument("--sigma", type=float, default=0.5, help="initial standard deviation of each weight")
    ap.add_argument("--rng", type=int, default=0, help="seed of the sampling")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "linear_scorer.json"))
    args = ap.parse_args()

    train, held_out = parse_seeds(args.train_seeds), parse_seeds(args.eval_seeds)
    rng = np.random.default_rng(args.rng)
    with tempfile.TemporaryDirectory() as tmp:
        nodes = subsample_nodes(args.nodes, args.every, tmp)
        env = SimEnv(nodes, args.pods, binary=args.binary, policy=args.policy, arrival="fgd")
        try:
            obs, _ = env.reset(seed=train[0])
            columns = obs["columns"]
            print(f"{len(env.node_names)} nodes, columns: {', '.join(columns)}", flush=True)

            def cost(w, seeds):
                scorer = LinearScorer(dict(zip(columns, w)))
                return float(np.mean([unallocated(episode(env, s, scorer.act)) for s in seeds]))

            # Start at the built-in policy's own score.
            mean = np.array([1.0 if c == "builtin_score" else 0.0 for c in columns])
            std = np.full(len(columns), args.sigma)
            best_w, best_cost = mean.copy(), cost(mean, train)
            print(f"start (builtin_score alone): {best_cost:.2f}% unallocated on the training seeds", flush=True)
            t0 = time.time()
            for it in range(args.iterations):
                samples = mean + std * rng.standard_normal((args.population, len(columns)))
                samples[0] = best_w  # keep the best so far in the race
                costs = np.array([cost(w, train) for w in samples])
                elite = samples[np.argsort(costs)[:args.elite]]
                mean, std = elite.mean(axis=0), elite.std(axis=0) + 0.02
                if costs.min() < best_cost:
                    best_cost, best_w = float(costs.min()), samples[int(np.argmin(costs))].copy()
                print(f"iteration {it + 1}: best {costs.min():.2f}%, elite mean {np.sort(costs)[:args.elite].mean():.2f}%, "
                      f"best so far {best_cost:.2f}% ({time.time() - t0:.0f}s)", flush=True)

            scorer = LinearScorer(dict(zip(columns, best_w)))
            ours = [unallocated(episode(env, s, scorer.act)) for s in held_out]
            builtin = [unallocated(episode(env, s, lambda o: o["builtin_action"])) for s in held_out]
        finally:
            env.close()
    print(f"held-out seeds {held_out}:")
    print(f"  linear scorer: {np.mean(ours):.2f} ± {np.std(ours):.2f}% unallocated at 100% arrived  {ours}")
    print(f"  built-in:      {np.mean(builtin):.2f} ± {np.std(builtin):.2f}%  {builtin}")
    scorer.save(args.out, trained={
        "nodes": os.path.basename(args.nodes), "pods": os.path.basename(args.pods), "every": args.every,
        "policy": args.policy or "the config's first profile", "train_seeds": train, "eval_seeds": held_out,
        "iterations": args.iterations, "population": args.population, "train_unallocated_pct": best_cost,
        "eval_unallocated_pct": ours, "eval_builtin_unallocated_pct": builtin})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
