"""Serves a trained linear scorer as gpusched's PolicyService.

    /usr/bin/python3 python/examples/serve_linear.py --weights python/examples/linear_scorer.json \
        --address 127.0.0.1:50051 [--decisions decisions.jsonl]

With --decisions, each request appends one JSON line: the pod's namespace
and name, the node with the best score (the first of equal ones), every
node with that score, and each node's score, so that a test can check
where the scheduler bound the pod. It prints
"serving on HOST:PORT" once it listens.
"""

import argparse
import json
import os
import sys
import threading


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpusched_policy.scorer import LinearScorer  # noqa: E402
from gpusched_policy.server import serve  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", required=True, help="weights JSON (train_linear.py's output)")
    ap.add_argument("--address", default="127.0.0.1:50051", help="host:port to listen on (loopback)")
    ap.add_argument("--decisions", help="append one JSON line per request: pod and best node")
    args = ap.parse_args()

    scorer = LinearScorer.load(args.weights)
    on_reply = None
    if args.decisions:
        out = open(args.decisions, "a", buffering=1)
        lock = threading.Lock()

        def on_reply(request, reply):
            if reply.values:
                scores = {n.name: v for n, v in zip(request.nodes, reply.values)}
            else:
                scores = {s.node: s.score for s in reply.scores}
            top = max(scores.values()) if scores else 0.0
            best = [name for name, v in scores.items() if v >= top - 1e-9]
            line = {"namespace": request.pod.namespace, "pod": request.pod.name,
                    "node": best[0] if best else "", "best": best, "scores": scores, "nodes": len(scores)}
            with lock:
                out.write(json.dumps(line) + "\n")
                out.flush()

    server, port = serve(scorer, args.address, on_reply=on_reply)
    host = args.address.rsplit(":", 1)[0]
    print(f"serving on {host}:{port}", flush=True)
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:
        server.stop(None)


if __name__ == "__main__":
    main()
