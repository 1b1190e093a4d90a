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
        # Without a session (a scheduler that may not read values): by name.
        self.assertEqual([s.node for s in reply.scores], ["n0", "n1", "n2"])
        np.testing.assert_allclose([s.score for s in reply.scores], [0.75, 1, 0], rtol=1e-6)
        self.assertEqual(len(reply.values), 0)

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
        self.assertIn("1 rows in 12 bytes for 2 nodes", e.exception.details())

    def test_incremental_requests(self):
        # Scored by builtin_score + free_gpu. The first request fills the
        # session's table at slots 0..2; the second sends n3 at slot 3 and
        # reuses slots 2 and 0 (n2, n0) with new builtin scores.
        server, port = serve(LinearScorer({"builtin_score": 1, "free_gpu": 1}), "127.0.0.1:0")
        self.addCleanup(server.stop, None)
        channel, score = score_stub(f"127.0.0.1:{port}")
        self.addCleanup(channel.close)
        first = request([[0.9, 1, 0.1], [0.9, 1, 0.2], [0.9, 1, 0.3]])
        first.session, first.sequence = "s", 1
        first.slots.extend([0, 1, 2])
        reply = score(first, timeout=10)
        self.assertTrue(reply.kept)
        np.testing.assert_allclose(reply.values, [1.0, 1.1, 1.2], rtol=1e-6)
        second = request([[0.5, 1, 0.7]])
        second.nodes[0].name = "n3"
        second.session, second.sequence, second.base = "s", 2, 1
        second.slots.append(3)
        second.reused.extend([2, 0])
        second.builtin_scores.extend([0.25, 0])
        reply = score(second, timeout=10)
        self.assertTrue(reply.kept)
        # In the whole request's order: n3 0.5 + 0.7, n2 0.25 + 0.3, n0 0 + 0.1.
        np.testing.assert_allclose(reply.values, [1.2, 0.55, 0.1], rtol=1e-6)
        # Base 1 is no longer the table's version (2 is): send it whole.
        stale = request([])
        stale.session, stale.sequence, stale.base = "s", 3, 1
        stale.reused.append(0)
        stale.builtin_scores.append(0)
        with self.assertRaises(grpc.RpcError) as e:
            score(stale, timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn('base 1 of session "s": the table is as of 2', e.exception.details())
        # A slot never sent, and a builtin score that is not finite, are the
        # request's errors; neither changes the table.
        for reused, builtin, message in [(9, 0.0, "reused[0] 9: not a slot the table holds"),
                                         (3, float("nan"), "builtin_scores[0] nan: want a finite number")]:
            bad = request([])
            bad.session, bad.sequence, bad.base = "s", 4, 2
            bad.reused.append(reused)
            bad.builtin_scores.append(builtin)
            with self.assertRaises(grpc.RpcError) as e:
                score(bad, timeout=10)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(message, e.exception.details())
        again = request([])
        again.session, again.sequence, again.base = "s", 5, 2
        again.reused.extend([3, 1])
        again.builtin_scores.extend([0, 0])
        np.testing.assert_allclose(score(again, timeout=10).values, [0.7, 0.2], rtol=1e-6)

    def test_a_service_that_keeps_no_tables(self):
        server, port = serve(LinearScorer({"free_gpu": 1}), "127.0.0.1:0", keep_requests=False)
        self.addCleanup(server.stop, None)
        channel, score = score_stub(f"127.0.0.1:{port}")
        self.addCleanup(channel.close)
        first = request([[0, 1, 0.1]])
        first.session, first.sequence = "s", 1
        first.slots.append(0)
        self.assertFalse(score(first, timeout=10).kept)
        # An incremental request is scored as it stands, its sent node only:
        # the scheduler sees the count fall short and sends it whole.
        second = request([[0, 1, 0.4]])
        second.session, second.sequence, second.base = "s", 2, 1
        second.slots.append(1)
        second.reused.append(0)
        second.builtin_scores.append(0)
        reply = score(second, timeout=10)
        self.assertFalse(reply.kept)
        np.testing.assert_allclose(reply.values, [0.4], rtol=1e-6)

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
