"""Evaluates a trained linear scorer in the environment on seeds it was not
trained on, beside the environment's built-in policy (the node the
scheduler's own scoring picks), on any node and pod list:

    /usr/bin/python3 python/examples/evaluate_linear.py --weights python/examples/linear_scorer.json \\
        --nodes ../shared/traces/alibaba-gpu-2023/openb_node_list_gpu_node.csv \\
        --pods ../shared/traces/alibaba-gpu-2023/openb_pod_list_default.csv --seeds 42..51

It prints the unallocated GPU % at 100% arrived per seed and their mean ±
sd; `gpusched simulate --seeds` gives the same for the other policies.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpusched_policy.env import SimEnv  # noqa: E402
from gpusched_policy.scorer import LinearScorer  # noqa: E402
from train_linear import episode, parse_seeds, unallocated  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--nodes", required=True)
    ap.add_argument("--pods", required=True)
    ap.add_argument("--seeds", default="42..51")
    ap.add_argument("--binary")
    ap.add_argument("--policy", help="the environment's built-in policy; default the config's")
    ap.add_argument("--tie-break", dest="tie_break", help="node-order or random; default the arrival's")
    args = ap.parse_args()

    scorer = LinearScorer.load(args.weights)
    seeds = parse_seeds(args.seeds)
    env = SimEnv(args.nodes, args.pods, binary=args.binary, policy=args.policy, arrival="fgd", tie_break=args.tie_break)
    try:
        ours = [unallocated(episode(env, s, scorer.act)) for s in seeds]
        builtin = [unallocated(episode(env, s, lambda o: o["builtin_action"])) for s in seeds]
    finally:
        env.close()
    print(f"seeds {seeds}")
    print(f"  linear scorer: {np.mean(ours):.2f} ± {np.std(ours, ddof=1) if len(ours) > 1 else 0:.2f}  {ours}")
    print(f"  built-in:      {np.mean(builtin):.2f} ± {np.std(builtin, ddof=1) if len(builtin) > 1 else 0:.2f}  {builtin}")


if __name__ == "__main__":
    main()
