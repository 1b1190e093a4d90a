import json
import os
import subprocess
import sys
import tempfile
import unittest

import grpc
import numpy as np

import tests.helpers  # noqa: F401  (puts the package on the path)
from gpusched_policy import policy_pb2 as pb
from gpusched_policy.scorer import LinearScorer
from gpusched_policy.server import SERVICE, serve

COLUMNS = ["builtin_score", "fits", "free_gpu"]


def request(rows):
    m = np.asarray(rows, dtype="<f4")
    return pb.ScoreRequest(
        pod=pb.Pod(namespace="default", name="p", gpus=1, milli_gpu=1000),
        nodes=[pb.Node(name=f"n{i}") for i in range(len(rows))],
        features=pb.FeatureMatrix(columns=COLUMNS, rows=len(rows), values=m.tobytes()),
        fallback_policy="FragFit")


def score_stub(address):
    channel = grpc.insecure_channel(address)
    return channel, channel.unary_unary(f"/{SERVICE}/Score", request_serializer=pb.ScoreRequest.SerializeToString,
                                        response_deserializer=pb.ScoreReply.FromString)


class ServerTest(unittest.TestCase):
    def test_linear_scorer_over_grpc(self):
        # Score = 2·builtin_score − 1·free_gpu (fits has no weight):
        #   n0: 2·0.5 − 0.25 = 0.75;  n1: 2·1 − 1 = 1;  n2: 2·0 − 0 = 0
        server, port = serve(LinearScorer({"builtin_score": 2, "free_gpu": -1}), "127.0.0.1:0")
        self.addCleanup(server.stop, None)
        channel, score = score_stub(f"127.0.0.1:{port}")
        self.addCleanup(channel.close)
        reply = score(request([[0.5, 1, 0.25], [1, 1, 1], [0, 1, 0]]), timeout=10)
        self.assertEqual([s.node for s in reply.scores], ["n0", "n1", "n2"])
        np.testing.assert_allclose([s.score for s in reply.scores], [0.75, 1, 0], rtol=1e-6)

    def test_rows_must_match_nodes(self):
        server, port = serve(LinearScorer({}), "127.0.0.1:0")
        self.addCleanup(server.stop, None)
        channel, score = score_stub(f"127.0.0.1:{port}")
        self.addCleanup(channel.close)
        req = request([[0, 1, 0]])
        req.nodes.add(name="extra")
        with self.assertRaises(grpc.RpcError) as e:
            score(req, timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("1 rows for 2 nodes", e.exception.details())

    def test_act_takes_the_best_allowed_node(self):
        s = LinearScorer({"free_gpu": 1})
        obs = {"nodes": np.array([[0, 1, 0.9], [0, 1, 0.5], [0, 0, 0.1]], dtype=np.float32), "columns": COLUMNS,
               "action_mask": np.array([False, True, True])}
        self.assertEqual(s.act(obs), 1)  # node 0 scores best but is masked

    def test_serve_linear_example(self):
        with tempfile.TemporaryDirectory() as d:
            weights = os.path.join(d, "w.json")
            LinearScorer({"free_gpu": -1}).save(weights)
            decisions = os.path.join(d, "decisions.jsonl")
            script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "serve_linear.py")
            proc = subprocess.Popen([sys.executable, script, "--weights", weights, "--address", "127.0.0.1:0",
                                     "--decisions", decisions], stdout=subprocess.PIPE, text=True)
            try:
                line = proc.stdout.readline()
                self.assertTrue(line.startswith("serving on 127.0.0.1:"), line)
                channel, score = score_stub(line.split()[-1])
                reply = score(request([[0, 1, 0.9], [0, 1, 0.2]]), timeout=10)
                channel.close()
                self.assertEqual(reply.scores[1].node, "n1")
                with open(decisions) as f:
                    line = json.loads(f.readline())
                scores = line.pop("scores")
                self.assertEqual(line, {"namespace": "default", "pod": "p", "node": "n1", "best": ["n1"], "nodes": 2})
                # free_gpu weighted -1: n0 -0.9, n1 -0.2 (float32 features).
                self.assertAlmostEqual(scores["n0"], -0.9, places=5)
                self.assertAlmostEqual(scores["n1"], -0.2, places=5)
            finally:
                proc.terminate()
                proc.wait(timeout=10)
                proc.stdout.close()


if __name__ == "__main__":
    unittest.main()
