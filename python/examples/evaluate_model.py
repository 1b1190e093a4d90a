"""Compares a model (gpusched.io/model/v1) with the built-in policy in
gpusched's simulator, on seeds and pod lists: the scheduler evaluates the
model itself (external.model), so this runs at the scheduler's speed.

    /usr/bin/python3 python/examples/evaluate_model.py --model python/examples/learned_model.json \\
        --nodes $T/openb_node_list_gpu_node.csv --pods $T/openb_pod_list_default.csv --seeds 42..51

Prints, per pod list, the mean and sd of the unallocated GPU % at 100%
arrived of each, and on how many seeds the model is better; with several
lists, on how many lists (by their mean over the seeds).
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpusched_policy.model import Model  # noqa: E402
from train_model import REPO, parse_seeds, simulate  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--nodes", required=True)
    ap.add_argument("--pods", required=True, help="one pod list, or several separated by commas")
    ap.add_argument("--seeds", default="42..51")
    ap.add_argument("--binary", default=os.environ.get("GPUSCHED_BIN", os.path.join(REPO, "bin", "gpusched")))
    ap.add_argument("--fallback", default="PairFit", help="the built-in policy compared with, and the model's fallback")
    ap.add_argument("--parallel", type=int, default=0)
    args = ap.parse_args()

    model = Model.load(args.model)
    seeds = parse_seeds(args.seeds)
    wins = losses = 0
    for pods in args.pods.split(","):
        res = simulate(args.binary, args.nodes, pods, {"model": model, "builtin": None}, seeds, args.fallback,
                       args.parallel)
        ours, base = np.array(res["model"]), np.array(res["builtin"])
        better, worse = int((ours < base).sum()), int((ours > base).sum())
        print(f"{os.path.basename(pods)}: model {ours.mean():.3f} ± {ours.std():.3f}%, {args.fallback} "
              f"{base.mean():.3f} ± {base.std():.3f}%; model better on {better}, worse on {worse} of {len(seeds)} seeds "
              f"({' '.join(f'{a:.2f}/{b:.2f}' for a, b in zip(ours, base))})", flush=True)
        wins += ours.mean() < base.mean()
        losses += ours.mean() > base.mean()
    if len(args.pods.split(",")) > 1:
        print(f"model better on {wins}, worse on {losses} of {len(args.pods.split(','))} lists")


if __name__ == "__main__":
    main()
