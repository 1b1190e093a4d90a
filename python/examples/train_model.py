"""Trains a model (gpusched's model format, gpusched.io/model/v1) that ranks
nodes by the built-in policy's score plus learned corrections, with the
cross-entropy method, and evaluates it against the built-in policy on
held-out seeds.

A candidate is a linear model: builtin_score (the built-in policy's score,
rescaled 0..1 over the feasible nodes) with weight 1, plus a weight on each
of --columns. The search starts at weights 0, so its first candidate is the
built-in policy itself, and every candidate it keeps did at least as well on
the training seeds. Each iteration runs --population candidates, the best
so far and new weight vectors sampled around the mean, every one on the
same training seeds (common random numbers: the candidates differ only by
their weights), keeps the --elite best by mean unallocated GPU % at 100%
arrived, and refits the mean and spread to them. In the first iteration the
new vectors probe each column alone, +sigma and -sigma, as many as the
population holds, so that a weight that helps on its own is found at once.

Each candidate runs in gpusched's own simulator as a profile whose
GPUPlacement evaluates the model itself (scoringStrategy External,
external.model): one "gpusched simulate" per iteration runs every candidate
and seed, at the scheduler's speed, one run per CPU. The result is a model
file the scheduler loads (docs/policy-service.md#models).

    /usr/bin/python3 python/examples/train_model.py \\
        --nodes ../shared/traces/alibaba-gpu-2023/openb_node_list_gpu_node.csv \\
        --pods ../shared/traces/alibaba-gpu-2023/openb_pod_list_default.csv \\
        --train-seeds 1..3 --eval-seeds 42..51 --out python/examples/learned_model.json
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpusched_policy.model import Model  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_linear import parse_seeds  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_COLUMNS = "chosen_free_after,partial_gpus_after,fragment_delta,free_gpu_after,idle_gpus_after"
# The profile the candidates run in: the simulator's own (the scheduler's
# filters, GPUPlacement the only scorer), with PairFit's scoring replaced.
BASE_CONFIG = os.path.join(REPO, "pkg", "simulator", "default-config.yaml")
POLICY_LINE = "      scoringStrategy:\n        type: PairFit\n"


def write_config(models, directory, fallback):
    """A KubeSchedulerConfiguration with one profile per model (by name),
    each scoring with its model file, or with the fallback policy itself
    where the model is None; returns its path."""
    with open(BASE_CONFIG) as f:
        base = f.read()
    head, profile = base.split("profiles:\n", 1)
    if POLICY_LINE not in profile:
        raise SystemExit(f"{BASE_CONFIG} no longer sets {POLICY_LINE!r}")
    out = [head, "profiles:\n"]
    for name, model in models.items():
        p = profile.replace("- schedulerName: gpusched", "- schedulerName: " + name, 1)
        if model is None:
            out.append(p.replace(POLICY_LINE, f"      scoringStrategy:\n        type: {fallback}\n"))
            continue
        path = os.path.join(directory, name + ".json")
        model.save(path)
        out.append(p.replace(POLICY_LINE, f"      external:\n        model: {json.dumps(path)}\n"
                             f"        fallback: {fallback}\n      scoringStrategy:\n        type: External\n"))
    config = os.path.join(directory, "config.yaml")
    with open(config, "w") as f:
        f.write("".join(out))
    return config


def simulate(binary, nodes, pods, models, seeds, fallback, parallel):
    """Unallocated GPU % at 100% arrived of each model on each seed:
    {name: [per seed]}."""
    with tempfile.TemporaryDirectory() as d:
        config = write_config(models, d, fallback)
        out = os.path.join(d, "report.json")
        cmd = [binary, "simulate", "--nodes", nodes, "--pods", pods, "--config", config,
               "--seeds", ",".join(map(str, seeds)), "--quiet", "--no-timings", "--json", out]
        if parallel:
            cmd += ["--parallel", str(parallel)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            report = json.load(f)
    result = {name: [] for name in models}
    for run in report["runs"]:
        value = run.get("unallocated_pct_at_100")
        # A run that never reached 100% arrived has no headline: count it as
        # everything unallocated, so that it is never chosen.
        result[run["policy"]].append(100.0 if value is None else value)
    return result


def linear(columns, w, **trained):
    return Model.linear({"builtin_score": 1.0, **dict(zip(columns, map(float, w)))}, **trained)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", required=True)
    ap.add_argument("--pods", required=True, help="one pod list, or several separated by commas (each seed runs on each)")
    ap.add_argument("--binary", default=os.environ.get("GPUSCHED_BIN", os.path.join(REPO, "bin", "gpusched")))
    ap.add_argument("--fallback", default="PairFit", help="the built-in policy: builtin_score, and the GPUs on the chosen node")
    ap.add_argument("--columns", default=DEFAULT_COLUMNS, help="the feature columns that get a learned weight")
    ap.add_argument("--train-seeds", default="1..3")
    ap.add_argument("--eval-seeds", default="42..51")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--population", type=int, default=10)
    ap.add_argument("--elite", type=int, default=3)
    ap.add_argument("--sigma", type=float, default=0.05, help="initial standard deviation of each weight")
    ap.add_argument("--rng", type=int, default=0, help="seed of the sampling")
    ap.add_argument("--parallel", type=int, default=0, help="runs at once; default one per CPU")
    ap.add_argument("--out", default=os.path.join(REPO, "python", "examples", "learned_model.json"))
    args = ap.parse_args()

    columns = [c for c in args.columns.split(",") if c]
    train, held_out = parse_seeds(args.train_seeds), parse_seeds(args.eval_seeds)
    lists = args.pods.split(",")
    rng = np.random.default_rng(args.rng)
    start = time.time()

    def costs(samples, seeds):
        models = {f"c{i}": linear(columns, w) for i, w in enumerate(samples)}
        per = {name: [] for name in models}
        for pods in lists:
            for name, values in simulate(args.binary, args.nodes, pods, models, seeds, args.fallback,
                                         args.parallel).items():
                per[name] += values
        return np.array([np.mean(per[f"c{i}"]) for i in range(len(samples))])

    mean, std = np.zeros(len(columns)), np.full(len(columns), args.sigma)
    best_w, best_cost, history = mean.copy(), None, []
    for it in range(args.iterations):
        samples = mean + std * rng.standard_normal((args.population, len(columns)))
        if it == 0:
            # First probe each column alone, both ways (±sigma), as far as
            # the population allows: a direction that helps alone is found
            # at once, where random samples dilute it among the others.
            probes = [s * args.sigma * np.eye(len(columns))[i] for i in range(len(columns)) for s in (1, -1)]
            for j, p in enumerate(probes[:args.population - 1]):
                samples[j + 1] = p
        samples[0] = best_w  # the best so far races again, on the same seeds
        c = costs(samples, train)
        if best_cost is None:
            print(f"the built-in policy alone: {c[0]:.3f}% unallocated on the training seeds", flush=True)
        elite = samples[np.argsort(c)[:args.elite]]
        mean, std = elite.mean(axis=0), elite.std(axis=0) + args.sigma / 10
        best_w, best_cost = samples[int(np.argmin(c))].copy(), float(c.min())
        history.append({"best": best_cost, "incumbent": float(c[0]), "elite_mean": float(np.sort(c)[:args.elite].mean())})
        print(f"iteration {it + 1}: best {best_cost:.3f}%, incumbent {c[0]:.3f}%, elite mean "
              f"{history[-1]['elite_mean']:.3f}% ({time.time() - start:.0f}s); weights "
              + ", ".join(f"{k} {v:+.4f}" for k, v in zip(columns, best_w)), flush=True)
    train_seconds = time.time() - start

    trained = {"nodes": os.path.basename(args.nodes), "pods": [os.path.basename(p) for p in lists],
               "fallback": args.fallback, "train_seeds": train, "iterations": args.iterations,
               "population": args.population, "elite": args.elite, "sigma": args.sigma, "rng": args.rng,
               "train_unallocated_pct": best_cost, "history": history, "train_seconds": round(train_seconds)}
    model = linear(columns, best_w)
    if held_out:
        res = {}
        for pods in lists:
            for name, values in simulate(args.binary, args.nodes, pods, {"learned": model, "builtin": None},
                                         held_out, args.fallback, args.parallel).items():
                res.setdefault(name, []).extend(values)
        ours, base = np.array(res["learned"]), np.array(res["builtin"])
        print(f"held-out seeds {held_out}:")
        print(f"  learned:  {ours.mean():.3f} ± {ours.std():.3f}% unallocated at 100% arrived")
        print(f"  built-in: {base.mean():.3f} ± {base.std():.3f}%")
        print(f"  better on {int((ours < base).sum())}, worse on {int((ours > base).sum())} of {len(ours)} runs")
        trained.update({"eval_seeds": held_out, "eval_unallocated_pct": ours.tolist(),
                        "eval_builtin_unallocated_pct": base.tolist()})
    model = linear(columns, best_w, **trained)
    model.save(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
